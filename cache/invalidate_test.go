package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// ExpireTags (soft): the tagged value is expired, not gone. It is not
// served while the origin answers (a Get finds nothing, a GetOrCompute
// recomputes), but stands in when the origin fails, inside StaleIfError.
// InvalidateTags (hard, the default) leaves nothing to stand in.
func TestExpireTagsServesStaleOnlyOnError(t *testing.T) {
	ctx := context.Background()
	for _, f := range fleets[:1] {
		a, b := func() (*cache.Cache[string], *cache.Cache[string]) {
			cs := replicasOn[string](t, 2, f.client, cache.Options{TTL: time.Hour, StaleIfError: time.Hour, FailSafeThrottle: -1})
			return cs[0], cs[1]
		}()
		tagged := func(v string) func(context.Context) (string, error) {
			return func(ctx context.Context) (string, error) { return v, cache.SetTags(ctx, "t") }
		}
		failing := func(context.Context) (string, error) { return "", errors.New("origin down") }
		for _, k := range []string{"soft", "hard"} {
			if v, err := a.GetOrCompute(ctx, k, tagged("old-"+k)); err != nil || v != "old-"+k {
				t.Fatalf("%s: %q %v", k, v, err)
			}
		}
		if err := b.ExpireTags(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if _, found, err := a.Get(ctx, "soft"); found || err != nil {
			t.Fatalf("Get after ExpireTags: found %v, %v", found, err)
		}
		r, err := a.Fetch(ctx, "soft", failing)
		if err != nil || r.Value != "old-soft" || r.Outcome != cache.Stale || r.Err == nil {
			t.Fatalf("failing origin after ExpireTags: %+v %v", r, err)
		}
		r, err = a.Fetch(ctx, "soft", tagged("new-soft"))
		if err != nil || r.Value != "new-soft" || r.Outcome != cache.Miss {
			t.Fatalf("working origin after ExpireTags: %+v %v", r, err)
		}
		// The hard invalidation of the same tag: no stand-in.
		if err := b.InvalidateTags(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if r, err := a.Fetch(ctx, "hard", failing); err == nil {
			t.Fatalf("failing origin after InvalidateTags served %+v", r)
		}
		if r, err := b.Fetch(ctx, "soft", failing); err == nil {
			t.Fatalf("failing origin after InvalidateTags (other replica) served %+v", r)
		}
	}
}

// With Redis down, InvalidateTags and Clear fail at once with
// ErrUnavailable once the breaker is open (and with an error matching it
// before).
func TestInvalidateRedisDown(t *testing.T) {
	ctx := context.Background()
	c := newCache[string](t, downClient(t), cache.Options{BreakerThreshold: 1})
	for range 2 {
		if err := c.InvalidateTags(ctx, "t"); !errors.Is(err, cache.ErrUnavailable) {
			t.Fatalf("InvalidateTags: %v", err)
		}
		if err := c.Clear(ctx); !errors.Is(err, cache.ErrUnavailable) {
			t.Fatalf("Clear: %v", err)
		}
	}
}

// Tagged values reach every replica's reads with their tags: a batch
// compute's SetTags apply to each of its keys, and InvalidateTags from any
// replica refuses them on all; a key tagged otherwise is untouched.
func TestInvalidateTagsBatchAndOtherTags(t *testing.T) {
	ctx := context.Background()
	cs := replicas[string](t, 2, cache.Options{TTL: time.Hour, L1Size: 100})
	var calls atomic.Int32
	batch := func(ctx context.Context, keys []string) (map[string]string, error) {
		calls.Add(1)
		out := map[string]string{}
		for _, k := range keys {
			out[k] = "v:" + k
		}
		return out, cache.SetTags(ctx, "group")
	}
	trackEachForL1(t, []string{"x", "y", "z"}, cs...)
	if _, err := cs[0].GetOrComputeMany(ctx, []string{"x", "y"}, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := cs[0].GetOrCompute(ctx, "z", func(ctx context.Context) (string, error) { return "z", cache.SetTags(ctx, "other") }); err != nil {
		t.Fatal(err)
	}
	if _, err := cs[1].GetOrComputeMany(ctx, []string{"x", "y"}, batch); err != nil || calls.Load() != 1 {
		t.Fatalf("hit: %v, %d calls", err, calls.Load())
	}
	if err := cs[1].InvalidateTags(ctx, "group"); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		for _, k := range []string{"x", "y"} {
			if _, found, err := c.Get(ctx, k); found || err != nil {
				t.Errorf("replica %d: %s still found (%v)", i, k, err)
			}
		}
		if v, found, err := c.Get(ctx, "z"); !found || err != nil || v != "z" {
			t.Errorf("replica %d: z, tagged otherwise: %q %v %v", i, v, found, err)
		}
	}
}

// While Redis is unreachable, values computed in degraded mode are kept for
// DegradedTTL; an InvalidateTags or Clear in this process (which fails with
// ErrUnavailable) still drops them.
func TestInvalidateDropsDegradedKeptValues(t *testing.T) {
	ctx := context.Background()
	c := newCache[string](t, downClient(t), cache.Options{BreakerThreshold: 1, DegradedTTL: time.Hour})
	var calls atomic.Int32
	fn := func(context.Context) (string, error) { return fmt.Sprint("v", calls.Add(1)), nil }
	for range 2 {
		if r, err := c.Fetch(ctx, "k", fn); err != nil || r.Value != "v1" || r.Outcome != cache.Degraded {
			t.Fatalf("%+v %v", r, err)
		}
	}
	for _, inv := range []func() error{
		func() error { return c.InvalidateTags(ctx, "t") },
		func() error { return c.Clear(ctx) },
	} {
		before := calls.Load()
		if err := inv(); !errors.Is(err, cache.ErrUnavailable) {
			t.Fatalf("invalidate with Redis down: %v", err)
		}
		if r, err := c.Fetch(ctx, "k", fn); err != nil || r.Value != fmt.Sprint("v", before+1) {
			t.Fatalf("after the invalidation: %+v %v (a kept value answered)", r, err)
		}
	}
}

// A stale value (inside its Stale window) that was invalidated is not
// served stale: the caller waits for the recompute, on every replica.
func TestInvalidateTagsStaleNotServed(t *testing.T) {
	ctx := context.Background()
	cs := replicas[string](t, 2, cache.Options{TTL: time.Minute, Stale: time.Hour})
	clk := cache.NewClock()
	for _, c := range cs {
		cache.UseClock(c, clk)
	}
	load := func(v string) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) { return v, cache.SetTags(ctx, "t") }
	}
	if _, err := cs[0].GetOrCompute(ctx, "k", load("old")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute) // stale now
	if err := cs[0].InvalidateTags(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if v, found, err := c.Get(ctx, "k"); found || err != nil {
			t.Fatalf("replica %d Get: %q %v %v", i, v, found, err)
		}
	}
	if r, err := cs[1].Fetch(ctx, "k", load("new")); err != nil || r.Value != "new" || r.Outcome != cache.Miss {
		t.Fatalf("after InvalidateTags: %+v %v (the stale value answered)", r, err)
	}
}
