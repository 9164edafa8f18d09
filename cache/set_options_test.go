package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Set's per-call options: the windows, the tags, bad input.

// Set takes per-call options: WithTTL and WithStale shape the windows,
// WithTags makes the value invalidable by tag; a Set after an invalidation
// is not invalidated by it. Bad input is an error, never a panic.
func TestSetOptions(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			var rdb redis.UniversalClient
			if mode == "redis" {
				rdb = redistest.Client(t)
			}
			c := newCache[string](t, rdb, cache.Options{TTL: time.Hour})
			clk := cache.NewClock()
			cache.UseClock(c, clk)
			if err := c.Set(ctx, "short", "v", cache.WithTTL(10*time.Second), cache.WithStale(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, "long", "v", cache.WithTags("a", "b"), cache.WithTags("c")); err != nil {
				t.Fatal(err)
			}
			clk.Advance(11 * time.Second)
			r, err := c.Fetch(ctx, "short", func(context.Context) (string, error) { return "computed", nil })
			if err != nil || r.Value != "v" || r.Outcome != cache.Stale {
				t.Fatalf("WithTTL(10s)+WithStale(1m) after 11s: %+v %v", r, err)
			}
			if v, found, err := c.Get(ctx, "long"); !found || err != nil || v != "v" {
				t.Fatalf("long: %q %v %v", v, found, err)
			}
			if err := c.InvalidateTags(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			if _, found, err := c.Get(ctx, "long"); found || err != nil {
				t.Fatalf("WithTags(c) after InvalidateTags(c): found %v, %v", found, err)
			}
			if err := c.Set(ctx, "long", "again", cache.WithTags("c")); err != nil {
				t.Fatal(err)
			}
			if v, found, err := c.Get(ctx, "long"); !found || err != nil || v != "again" {
				t.Fatalf("Set after the invalidation: %q %v %v", v, found, err)
			}
			// InvalidateTags without tags is a no-op, never a Clear.
			if err := c.InvalidateTags(ctx); err != nil {
				t.Fatal(err)
			}
			if _, found, _ := c.Get(ctx, "long"); !found {
				t.Fatal("InvalidateTags() cleared the namespace")
			}
			many := make([]string, 33)
			for i := range many {
				many[i] = fmt.Sprint("t", i)
			}
			for _, tc := range []struct {
				name string
				err  error
				set  func() error
			}{
				{"negative TTL", cache.ErrInvalidOptions, func() error { return c.Set(ctx, "k", "v", cache.WithTTL(-time.Second)) }},
				{"zero TTL", cache.ErrInvalidOptions, func() error { return c.Set(ctx, "k", "v", cache.WithTTL(0)) }},
				{"negative stale", cache.ErrInvalidOptions, func() error { return c.Set(ctx, "k", "v", cache.WithStale(-1)) }},
				{"empty tag", cache.ErrInvalidTag, func() error { return c.Set(ctx, "k", "v", cache.WithTags("")) }},
				{"space in tag", cache.ErrInvalidTag, func() error { return c.Set(ctx, "k", "v", cache.WithTags("a b")) }},
				{"brace in tag", cache.ErrInvalidTag, func() error { return c.Set(ctx, "k", "v", cache.WithTags("{a}")) }},
				{"long tag", cache.ErrInvalidTag, func() error { return c.Set(ctx, "k", "v", cache.WithTags(strings.Repeat("x", 129))) }},
				{"33 tags", cache.ErrInvalidTag, func() error { return c.Set(ctx, "k", "v", cache.WithTags(many...)) }},
				{"InvalidateTags empty", cache.ErrInvalidTag, func() error { return c.InvalidateTags(ctx, "ok", "") }},
				{"ExpireTags bad byte", cache.ErrInvalidTag, func() error { return c.ExpireTags(ctx, "é") }},
				{"SetTags in fn", cache.ErrInvalidTag, func() error {
					_, err := c.GetOrCompute(ctx, "k2", func(ctx context.Context) (string, error) { return "v", cache.SetTags(ctx, "a\n") })
					return err
				}},
			} {
				if err := tc.set(); !errors.Is(err, tc.err) {
					t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
				}
			}
			if _, found, _ := c.Get(ctx, "k"); found {
				t.Error("a Set with bad options stored its value")
			}
			if err := cache.SetTags(ctx, "a"); err == nil {
				t.Error("SetTags outside a compute function: no error")
			}
		})
	}
}
