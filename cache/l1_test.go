package cache_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// waitForL1 reads key, computing v, until c's L1 holds an entry: L1 fills
// only once it tracks the key, from the key's second read. Done when a read
// is an L1 hit (L1Entries would count a tombstone).
func waitForL1[V any](t *testing.T, c *cache.Cache[V], key string, v V) {
	t.Helper()
	fn := func(context.Context) (V, error) { return v, nil }
	waitFor(t, "L1 to answer "+key, func() bool {
		before := c.Stats().L1Hits
		if _, err := c.Fetch(context.Background(), key, fn); err != nil {
			t.Fatal(err)
		}
		return c.Stats().L1Hits > before
	})
}

// trackForL1 waits until c's L1 tracks key (its channel subscribed and
// confirmed, and the invalidation channel too): the next read of key goes
// into L1. A key is tracked from its second read; tests that want a
// key's first compute in L1 track it first.
func trackForL1[V any](t *testing.T, c *cache.Cache[V], key string) {
	t.Helper()
	waitFor(t, "L1 to track "+key, func() bool { return cache.L1Tracked(c, key) })
}

// trackEachForL1 is trackForL1 for every key on every cache of cs with L1
// on.
func trackEachForL1[V any](t *testing.T, keys []string, cs ...*cache.Cache[V]) {
	t.Helper()
	for _, c := range cs {
		if cache.L1Size(c) == 0 {
			continue
		}
		for _, k := range keys {
			trackForL1(t, c, k)
		}
	}
}

func TestL1HitsWithoutRedis(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{L1Size: 100})
	ctx := context.Background()
	o := &origin[string]{value: "v"}
	trackForL1(t, c, "k")
	if _, err := c.Fetch(ctx, "k", o.fn); err != nil {
		t.Fatal(err)
	}
	before := c.Stats().L1Hits
	for range 10 {
		if r, err := c.Fetch(ctx, "k", o.fn); err != nil || r.Outcome != cache.Hit || r.Value != "v" {
			t.Fatalf("%+v %v", r, err)
		}
	}
	if got := c.Stats().L1Hits - before; got != 10 {
		t.Fatalf("L1 hits %d, want 10", got)
	}
}

// 4 replicas with L1: a Delete or Set on one reaches every replica's L1.
func TestL1InvalidationReachesEveryReplica(t *testing.T) {
	caches := replicas[string](t, 4, cache.Options{L1Size: 100})
	ctx := context.Background()
	fill := func(want string) {
		t.Helper()
		for _, c := range caches {
			waitFor(t, "an L1 entry", func() bool {
				v, found, err := c.Get(ctx, "k")
				if err != nil || !found || v != want {
					t.Fatalf("Get: %q %v %v, want %q", v, found, err, want)
				}
				return c.Stats().L1Entries == 1
			})
		}
	}
	if err := caches[0].Set(ctx, "k", "one"); err != nil {
		t.Fatal(err)
	}
	fill("one")
	if err := caches[0].Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	for i, c := range caches {
		waitFor(t, fmt.Sprint("replica ", i, "'s invalidation"), func() bool { return c.Stats().L1Entries == 0 })
		if _, found, _ := c.Get(ctx, "k"); found {
			t.Fatalf("replica %d still finds the deleted key", i)
		}
	}
	if err := caches[0].Set(ctx, "k", "two"); err != nil {
		t.Fatal(err)
	}
	fill("two")
	if err := caches[3].Set(ctx, "k", "three"); err != nil {
		t.Fatal(err)
	}
	for i, c := range caches {
		waitFor(t, fmt.Sprint("replica ", i, " to see the new value"), func() bool {
			v, _, _ := c.Get(ctx, "k")
			return v == "three"
		})
	}
}

// A replica whose subscription is cut and restored clears its L1: it may
// have missed invalidations.
func TestL1ClearedAfterReconnect(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{L1Size: 100})
	ctx := context.Background()
	waitForL1(t, c, "k", "v")
	if err := redistest.Client(t).ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the L1 to clear", func() bool { st := c.Stats(); return st.L1Clears >= 1 && st.L1Entries == 0 })
	// And once resubscribed it fills again.
	waitForL1(t, c, "k", "v")
}

// The contract: values from L1 are shared between callers.
func TestL1ValuesAreShared(t *testing.T) {
	c := newCache[[]int](t, redistest.Client(t), cache.Options{L1Size: 10})
	ctx := context.Background()
	fn := func(context.Context) ([]int, error) { return []int{1, 2, 3}, nil }
	waitFor(t, "an L1 entry", func() bool { _, _ = c.Fetch(ctx, "k", fn); return c.Stats().L1Entries == 1 })
	a, _ := c.GetOrCompute(ctx, "k", fn)
	b, _ := c.GetOrCompute(ctx, "k", fn)
	if &a[0] != &b[0] {
		t.Fatal("L1 hits returned copies; the documented contract is a shared value")
	}
}

func TestL1IsBounded(t *testing.T) {
	c := newCache[int](t, redistest.Client(t), cache.Options{L1Size: 32})
	ctx := context.Background()
	waitForL1(t, c, "warm", 0)
	for i := range 1000 {
		if i < 48 { // L1 tracks up to twice its size between sweeps
			trackForL1(t, c, fmt.Sprint("k", i))
		}
		if _, err := c.GetOrCompute(ctx, fmt.Sprint("k", i), func(context.Context) (int, error) { return i, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Stats().L1Entries; n > 32 || n == 0 {
		t.Fatalf("L1 holds %d entries, limit 32", n)
	}
}

func TestL1StampedeStillOneCompute(t *testing.T) {
	caches := replicas[string](t, 4, cache.Options{L1Size: 100})
	o := &origin[string]{value: "v", delay: 50 * time.Millisecond}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range caches {
		for range 100 {
			wg.Go(func() {
				<-start
				if v, err := c.GetOrCompute(context.Background(), "hot", o.fn); err != nil || v != "v" {
					t.Errorf("%q %v", v, err)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("origin ran %d times with L1 on", n)
	}
}

// An L1 entry is never served past its fresh window, whatever L1TTL is: the
// timeline walks past the TTL and the next call recomputes.
func TestL1NeverServesPastFreshWindow(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{TTL: time.Minute, L1Size: 100, L1TTL: time.Hour})
	clk := cache.NewClock()
	cache.UseClock(c, clk)
	ctx := context.Background()
	o := &origin[string]{value: "v"}
	// L1 fills only once invalidations are subscribed, and a put refused
	// before that leaves a tombstone the next read replaces.
	waitFor(t, "an L1 hit", func() bool {
		r, err := c.Fetch(ctx, "k", o.fn)
		if err != nil || r.Value != "v" {
			t.Fatalf("before the TTL: %+v %v", r, err)
		}
		return c.Stats().L1Hits > 0
	})
	clk.Advance(time.Minute + time.Millisecond)
	hits := c.Stats().L1Hits
	calls := o.calls.Load()
	r, err := c.Fetch(ctx, "k", o.fn)
	if err != nil || r.Outcome != cache.Miss || c.Stats().L1Hits != hits || o.calls.Load() != calls+1 {
		t.Fatalf("past the TTL: %+v %v, L1 hits %d -> %d: want a recompute", r, err, hits, c.Stats().L1Hits)
	}
}

// Guarantee: an L1 entry is never served past its fresh window, whatever
// L1TTL is (here an hour, against a 30 ms TTL): once the window has passed,
// Get finds nothing and GetOrCompute computes again.
func TestL1NotServedPastFreshWindowWhateverL1TTL(t *testing.T) {
	for _, mode := range []string{"Set", "GetOrCompute", "GetOrComputeMany"} {
		t.Run(mode, func(t *testing.T) {
			const ttl = time.Minute
			c := newCache[string](t, redistest.Client(t), cache.Options{L1Size: 100, L1TTL: time.Hour, TTL: ttl})
			clk := cache.NewClock()
			cache.UseClock(c, clk)
			ctx := bounded(t, 10*time.Second)
			trackForL1(t, c, "k")
			switch mode {
			case "Set":
				if err := c.Set(ctx, "k", "old"); err != nil {
					t.Fatal(err)
				}
			case "GetOrCompute":
				if _, err := c.GetOrCompute(ctx, "k", func(context.Context) (string, error) { return "old", nil }); err != nil {
					t.Fatal(err)
				}
			case "GetOrComputeMany":
				if _, err := c.GetOrComputeMany(ctx, []string{"k"}, func(_ context.Context, ks []string) (map[string]string, error) {
					return map[string]string{"k": "old"}, nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			// Read it while fresh, so that it is in L1 (when synced).
			for range 3 {
				_, _, _ = c.Get(ctx, "k")
			}
			clk.Advance(ttl + time.Millisecond)
			if v, found, err := c.Get(ctx, "k"); err != nil || found {
				t.Fatalf("Get past the fresh window: %q found=%v err=%v", v, found, err)
			}
			o := &origin[string]{value: "new"}
			if v, err := c.GetOrCompute(ctx, "k", o.fn); err != nil || v != "new" || o.calls.Load() != 1 {
				t.Fatalf("GetOrCompute past the fresh window: %q, %v, %d computes", v, err, o.calls.Load())
			}
			got, err := c.GetOrComputeMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
				return map[string]string{"k": "newer"}, nil
			})
			if err != nil || got["k"] == "old" {
				t.Fatalf("GetOrComputeMany past the fresh window: %v, %v", got, err)
			}
		})
	}
}
