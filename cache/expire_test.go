package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// Issue 27 (Expire): Expire(key) is the single-key ExpireTags. After it
// returns, this replica answers the value to no call as a hit (Get finds
// nothing, L1 included), other replicas' L1 tiers drop it on the
// announcement, the next call recomputes, and while the origin fails the
// value still stands in inside its stale-if-error window. On Redis with L1
// off and on, and in process-local mode.
func TestExpireRecomputesAndKeepsTheValueForStaleIfError(t *testing.T) {
	for mode, m := range expireTagsModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := bounded(t, time.Minute)
			cs, _ := expireTagsFleet(t, mode, cache.Options{TTL: time.Minute, StaleIfError: time.Hour})
			a, b := cs[0], cs[len(cs)-1]
			f := newTagged("old")
			trackEachForL1(t, []string{"k"}, cs...)
			for _, c := range cs { // every replica holds it, in L1 too
				if v, err := c.GetOrCompute(ctx, "k", f.fn); err != nil || v != "old" {
					t.Fatalf("fill: %q %v", v, err)
				}
			}
			if err := a.Expire(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if v, found, err := a.Get(ctx, "k"); found || err != nil {
				t.Fatalf("Get after Expire on its replica: %q %v %v", v, found, err)
			}
			pollFor(t, "the other replica's L1 to drop the value", 5*time.Second, 2*time.Millisecond, func() bool {
				_, found, _ := b.Get(ctx, "k")
				return !found
			})

			// The next call recomputes.
			f.value.Store("new")
			f.calls.Store(0)
			if v, err := b.GetOrCompute(ctx, "k", f.fn); err != nil || v != "new" || f.calls.Load() != 1 {
				t.Fatalf("after Expire: %q %v, fn ran %d times, want once", v, err, f.calls.Load())
			}

			// Expired again with the origin failing: it is called, and the
			// value stands in.
			if err := b.Expire(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			f.fail.Store(true)
			f.calls.Store(0)
			if r, err := a.Fetch(ctx, "k", f.fn); err != nil || r.Value != "new" || r.Outcome != cache.Stale || f.calls.Load() != 1 {
				t.Fatalf("failing origin after Expire: %+v %v, fn ran %d times, want once", r, err, f.calls.Load())
			}
		})
	}
}

// Without a stale-if-error window there is nothing to keep: Expire deletes,
// and a failing origin's error reaches the caller. A missing key is no
// error.
func TestExpireWithoutStaleIfErrorDeletes(t *testing.T) {
	for mode, m := range expireTagsModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := bounded(t, time.Minute)
			cs, _ := expireTagsFleet(t, mode, cache.Options{TTL: time.Minute})
			a := cs[0]
			f := newTagged("old")
			if _, err := a.GetOrCompute(ctx, "k", f.fn); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"k", "missing"} {
				if err := a.Expire(ctx, k); err != nil {
					t.Fatalf("Expire(%s): %v", k, err)
				}
			}
			f.fail.Store(true)
			if v, err := a.GetOrCompute(ctx, "k", f.fn); err == nil {
				t.Fatalf("failing origin after Expire: %q, want its error", v)
			}
		})
	}
}

// Like Delete, Expire takes the lease away: a compute in flight during it
// cannot store its value, which began before Expire. Bad input is an error.
func TestExpireFencesTheComputeInFlight(t *testing.T) {
	for mode, m := range expireTagsModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := bounded(t, time.Minute)
			cs, _ := expireTagsFleet(t, mode, cache.Options{TTL: time.Minute, StaleIfError: time.Hour})
			a, b := cs[0], cs[len(cs)-1]
			started, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := a.GetOrCompute(ctx, "k", func(context.Context) (string, error) {
					close(started)
					select {
					case <-release:
					case <-ctx.Done():
					}
					return "in flight", nil
				})
				done <- err
			}()
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("the compute did not start")
			}
			if err := b.Expire(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			for i, c := range cs {
				if v, found, err := c.Get(ctx, "k"); found || err != nil {
					t.Errorf("replica %d: the fenced compute's value was stored: %q %v %v", i, v, found, err)
				}
			}
			if err := a.Expire(ctx, ""); !errors.Is(err, cache.ErrInvalidKey) {
				t.Errorf("Expire(\"\"): %v, want ErrInvalidKey", err)
			}
			var nilCtx context.Context
			if err := a.Expire(nilCtx, "k"); !errors.Is(err, cache.ErrNilContext) {
				t.Errorf("Expire(nil): %v, want ErrNilContext", err)
			}
		})
	}
}
