package cache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// manyTags returns n distinct tags t0 … t(n-1).
func manyTags(n int) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprint("t", i)
	}
	return tags
}

// markKeyOf is the Redis name of tag's mark in namespace ns ({ns:tag}:t):
// the one place these tests spell it.
func markKeyOf(ns, tag string) string { return "{" + ns + ":" + tag + "}:t" }

// InvalidateTags and ExpireTags take any number of tags in one call (the
// limit of 32 is per entry), on two replicas (L1 off and on) and in
// process-local mode: an entry tagged with any of them, first, middle or
// last of the list, is invalidated on every replica; one tagged otherwise
// is not.
func TestInvalidateTagsAcceptsAnyNumberOfTags(t *testing.T) {
	all := manyTags(1000)
	for mode, m := range expireTagsModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := bounded(t, time.Minute)
			cs, _ := expireTagsFleet(t, mode, cache.Options{TTL: time.Hour})
			a, b := cs[0], cs[len(cs)-1]
			store := func(tag string) {
				t.Helper()
				if err := a.Set(ctx, tag, "v", cache.WithTags(tag)); err != nil {
					t.Fatal(err)
				}
			}
			picked := []string{"t0", "t31", "t32", "t500", "t999"}
			for _, inv := range []struct {
				name string
				call func(context.Context, ...string) error
			}{{"InvalidateTags", b.InvalidateTags}, {"ExpireTags", b.ExpireTags}} {
				for _, tag := range append(picked, "other") {
					store(tag)
				}
				if err := inv.call(ctx, all...); err != nil {
					t.Fatalf("%s of %d tags: %v", inv.name, len(all), err)
				}
				for i, c := range cs {
					for _, tag := range picked {
						if _, found, err := c.Get(ctx, tag); found || err != nil {
							t.Errorf("replica %d: an entry tagged %s is found after %s of %d tags (%v)", i, tag, inv.name, len(all), err)
						}
					}
					if _, found, err := c.Get(ctx, "other"); !found || err != nil {
						t.Errorf("replica %d: an entry tagged otherwise is gone after %s (%v)", i, inv.name, err)
					}
				}
			}
			// Bad tags are still refused whole, wherever they are in the list.
			if err := b.InvalidateTags(ctx, append(manyTags(300), "")...); !errors.Is(err, cache.ErrInvalidTag) {
				t.Fatalf("an empty tag among 301: %v", err)
			}
		})
	}
}

// When one batch of a large invalidation fails (a tag's mark key holds a
// string, so its script fails), the call returns an error matching
// ErrUnavailable and nothing is guaranteed; the batches before it were
// written, as documented: their tags' entries are invalidated.
func TestInvalidateTagsBatchFailingMidway(t *testing.T) {
	ctx := bounded(t, time.Minute)
	ns := redistest.Prefix(t)
	cs := replicas[string](t, 2, cache.Options{Namespace: ns, TTL: time.Hour})
	a, b := cs[0], cs[1]
	all := manyTags(1000)
	for _, tag := range []string{"t0", "t999"} {
		if err := a.Set(ctx, tag, "v", cache.WithTags(tag)); err != nil {
			t.Fatal(err)
		}
	}
	if err := redistest.Client(t).Set(ctx, markKeyOf(ns, "t998"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := b.InvalidateTags(ctx, all...)
	if !errors.Is(err, cache.ErrUnavailable) {
		t.Fatalf("a batch failing: %v, want ErrUnavailable", err)
	}
	t.Log(err) // says how far it got
	if _, found, err := a.Get(ctx, "t0"); found || err != nil {
		t.Fatalf("the first batch's tag was not invalidated (found %v, %v)", found, err)
	}
}
