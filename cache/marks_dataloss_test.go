package cache_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

// dataLossServer starts a redis-server of the test's own, without
// persistence: Restart loses every key, as a crash of an unpersisted Redis
// (or a failover to an empty replica) would.
func dataLossServer(t *testing.T) *redisserver.Server {
	t.Helper()
	srv, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		redistest.Server(t) // skips without redis-server, fails under CI
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// dataLossReplica is one replica on srv, with a client of its own that
// fails fast while the server is down.
func dataLossReplica(t *testing.T, srv *redisserver.Server, opts cache.Options) *cache.Cache[string] {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	opts.Namespace = "loss"
	opts.BreakerThreshold, opts.BreakerCooldown = 1, 10*time.Millisecond
	return newCache[string](t, rdb, opts)
}

// reachable waits until c reads from Redis again after a restart (its
// connections re-dialled, its breaker closed).
func reachable(t *testing.T, c *cache.Cache[string]) {
	t.Helper()
	waitFor(t, "Redis reachable again", func() bool {
		_, _, err := c.Get(bounded(t, time.Second), "reachable")
		return err == nil && !c.Stats().BreakerOpen
	})
}

// taggedValue is a compute function that tags its value with "t" and
// counts its calls.
func taggedValue(calls *atomic.Int32, v string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		calls.Add(1)
		return v, cache.SetTags(ctx, "t")
	}
}

// Redis loses its data (a restart without persistence) after invalidations
// raised the marks the running replicas hold: their computes, single and
// batch, with L1 on and off, and their Sets, work again at once (fn once
// per key, no ErrInvalidated), as on a replica started after the loss.
func TestTaggedComputesRecoverAfterRedisLosesItsData(t *testing.T) {
	for _, l1 := range []int{0, 100} {
		t.Run(map[int]string{0: "L1 off", 100: "L1 on"}[l1], func(t *testing.T) {
			srv := dataLossServer(t)
			opts := cache.Options{TTL: time.Hour, L1Size: l1}
			a, b := dataLossReplica(t, srv, opts), dataLossReplica(t, srv, opts)
			ctx := bounded(t, time.Minute)
			var calls atomic.Int32
			for _, inv := range []func() error{
				func() error { return a.InvalidateTags(ctx, "t") },
				func() error { return b.ExpireTags(ctx, "t") },
				func() error { return a.Clear(ctx) },
				func() error { return b.InvalidateTags(ctx, "t", "u") },
			} {
				if err := inv(); err != nil {
					t.Fatal(err)
				}
				// Both replicas read the marks the invalidation raised.
				for _, c := range []*cache.Cache[string]{a, b} {
					if _, err := c.GetOrCompute(ctx, "k", taggedValue(&calls, "before")); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			reachable(t, a)
			reachable(t, b)
			calls.Store(0)
			for i, c := range []*cache.Cache[string]{a, b} {
				if r, err := c.Fetch(ctx, "k", taggedValue(&calls, "after")); err != nil || r.Value != "after" {
					t.Fatalf("replica %d after the loss: %+v %v (fn ran %d times)", i, r, err, calls.Load())
				}
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("fn ran %d times for one key across the fleet after the loss, want 1", n)
			}
			batch := func(ctx context.Context, keys []string) (map[string]string, error) {
				calls.Add(1)
				out := map[string]string{}
				for _, k := range keys {
					out[k] = "batch:" + k
				}
				return out, cache.SetTags(ctx, "u")
			}
			calls.Store(0)
			for i, c := range []*cache.Cache[string]{b, a} {
				got, err := c.GetOrComputeMany(ctx, []string{"x", "y"}, batch)
				if err != nil || got["x"] != "batch:x" || got["y"] != "batch:y" {
					t.Fatalf("replica %d batch after the loss: %v %v", i, got, err)
				}
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("the batch fn ran %d times after the loss, want 1", n)
			}
			if err := b.Set(ctx, "s", "set", cache.WithTags("t")); err != nil {
				t.Fatal(err)
			}
			for i, c := range []*cache.Cache[string]{b, a} {
				if v, found, err := c.Get(ctx, "s"); err != nil || !found || v != "set" {
					t.Fatalf("replica %d: Get of a value Set after the loss: %q %v %v", i, v, found, err)
				}
			}
			// And the invalidations still work, on every replica.
			if err := a.InvalidateTags(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			for i, c := range []*cache.Cache[string]{a, b} {
				for _, k := range []string{"k", "s"} {
					if v, found, err := c.Get(ctx, k); found || err != nil {
						t.Fatalf("replica %d: %s after InvalidateTags: %q %v %v", i, k, v, found, err)
					}
				}
			}
		})
	}
}

// A compute in flight while Redis loses its data began before an
// InvalidateTags made after the loss, by a replica started after it (which
// never saw the counter's values from before): its value must not answer.
// The counter restarting from 0 gave that invalidation a mark below the
// compute's generation, and the pre-invalidation value answered.
func TestInvalidationAfterDataLossRefusesComputesFromBefore(t *testing.T) {
	srv := dataLossServer(t)
	opts := cache.Options{TTL: time.Hour, WaitTimeout: time.Minute, ComputeTimeout: time.Minute}
	a := dataLossReplica(t, srv, opts)
	ctx := bounded(t, time.Minute)
	for range 3 {
		if err := a.InvalidateTags(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	}
	h := newHeld(t, "before")
	var calls atomic.Int32
	var first atomic.Bool
	first.Store(true)
	fn := func(ctx context.Context) (string, error) {
		calls.Add(1)
		if err := cache.SetTags(ctx, "t"); err != nil {
			return "", err
		}
		if first.CompareAndSwap(true, false) {
			return h.fn(ctx)
		}
		return "after", nil
	}
	res := async(func() valErr[string] {
		v, err := a.GetOrCompute(ctx, "k", fn)
		return valErr[string]{v, err}
	})
	within(t, h.calls, 10*time.Second, "the compute starting")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	late := dataLossReplica(t, srv, opts)
	reachable(t, late)
	if err := late.InvalidateTags(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	h.Release()
	r := within(t, res, 10*time.Second, "the compute's answer")
	if r.v.err != nil || r.v.v != "after" {
		t.Fatalf("the compute in flight across the loss and the invalidation answered %q %v (fn ran %d times), want it computed again",
			r.v.v, r.v.err, calls.Load())
	}
}
