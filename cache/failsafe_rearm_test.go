package cache_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The fail-safe re-arm (a failed refresh keeps the stale value): its throttle
// holds across replicas and on the batch path, it never overwrites a Set or
// Delete, its value never enters L1 as fresh, and it outlives StaleIfError.

// Pins (guarantee 6): a background refresh (Stale window) that read the
// stale entry before another replica's fail-safe re-arm, and claims after
// it, must not call the origin again inside FailSafeThrottle.
//
// Replica B reaches Redis through a proxy with latency, so its refresh's
// claim lands after A's failed refresh re-armed the value.
func TestFailSafeThrottleHoldsForALateRefreshClaim(t *testing.T) {
	ns := redistest.Prefix(t)
	// InvalidationWait stays the default (100 ms), below B's 300 ms round
	// trip: B's marks reads vouch for its decisions however late they come.
	opts := cache.Options{Namespace: ns, Stale: time.Hour, StaleIfError: time.Hour, FailSafeThrottle: time.Minute}
	clk := writeStale(t, redistest.Client(t), ns, "k", "old", opts)
	a := newCache[string](t, redistest.Client(t), opts)
	p, rdb := proxiedClient(t, 5*time.Second)
	b := newCache[string](t, rdb, opts)
	clocked(clk, a, b)

	var calls atomic.Int32
	first := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	failing := func(context.Context) (string, error) {
		if calls.Add(1) == 1 {
			close(first)
			<-release
		}
		return "", errors.New("origin down")
	}
	ctx := bounded(t, 20*time.Second)
	if r, err := a.Fetch(ctx, "k", failing); err != nil || r.Outcome != cache.Stale {
		t.Fatalf("A: %+v %v", r, err)
	}
	within(t, first, 5*time.Second, "A's background refresh starting")
	p.SetLatency(150 * time.Millisecond)
	// B reads the stale entry while A still holds the lease.
	if r, err := b.Fetch(ctx, "k", failing); err != nil || r.Value != "old" || r.Outcome != cache.Stale {
		t.Fatalf("B: %+v %v", r, err)
	}
	close(release) // A fails now and re-arms the value; B's claim is still on the wire
	eventually(t, 5*time.Second, func() bool { return a.Stats().FailSafe == 1 }, func() string { return "A did not re-arm" })
	// Give B's refresh time to claim (150ms each way) and lead.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && calls.Load() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	p.SetLatency(0)
	if n := calls.Load(); n != 1 {
		t.Fatalf("origin called %d times inside one FailSafeThrottle across 2 replicas, want 1 (B refreshes: %d)", n, b.Stats().Refreshes)
	}
}

// Pins (guarantee 6): a fail-safe value is never put into L1 as fresh.
// GetOrComputeMany on replica B reads the expired entry, replica A's compute
// fails and re-arms it, then B claims and its lead re-read finds the
// re-armed (fresh, fail-safe) entry: the "done" branch. B must not put it
// into L1, or B's next Fetch answers it as a Hit.
func TestFailSafeValueNeverInL1ViaBatch(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, StaleIfError: time.Hour, FailSafeThrottle: time.Minute}
	clk := writeStale(t, redistest.Client(t), ns, "k", "old", opts)
	a := newCache[string](t, redistest.Client(t), opts)
	p, rdb := proxiedClient(t, 5*time.Second)
	bopts := opts
	bopts.L1Size = 100
	b := newCache[string](t, rdb, bopts)
	clocked(clk, a, b)
	ctx := bounded(t, 20*time.Second)
	// Wait until B's L1 tracks k (it takes k only then).
	trackForL1(t, b, "k")

	var bcalls atomic.Int32
	p.SetLatency(300 * time.Millisecond)
	done := async(func() valErr[map[string]string] {
		m, err := b.GetOrComputeMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
			bcalls.Add(1)
			return nil, errors.New("origin down")
		})
		return valErr[map[string]string]{m, err}
	})
	// B's MGET reaches Redis after 300ms, its claim after 900ms: A fails
	// and re-arms in between.
	time.Sleep(500 * time.Millisecond) // a window, not synchronisation of the library
	r, err := a.Fetch(ctx, "k", func(context.Context) (string, error) { return "", errors.New("origin down") })
	if err != nil || r.Value != "old" || r.Outcome != cache.Stale || a.Stats().FailSafe != 1 {
		t.Fatalf("A: %+v %v %+v", r, err, a.Stats())
	}
	res := within(t, done, 10*time.Second, "B's batch")
	p.SetLatency(0)
	if res.v.err != nil || res.v.v["k"] != "old" {
		t.Fatalf("B's batch: %v %v", res.v.v, res.v.err)
	}
	r, err = b.Fetch(ctx, "k", func(context.Context) (string, error) { bcalls.Add(1); return "", errors.New("origin down") })
	if err != nil || r.Value != "old" || r.Outcome != cache.Stale {
		t.Fatalf("B after the batch: %+v %v (L1 hits %d): a fail-safe value must answer as Stale, never as Hit", r, err, b.Stats().L1Hits)
	}
}

// Pins (guarantees 2, 6): a fail-safe re-arm never overwrites a Set or
// Delete that happened while the failing compute was in flight, in Redis
// and process-local mode.
func TestFailSafeRearmFencedBySetDelete(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		for _, op := range []string{"set", "delete"} {
			t.Run(mode+"/"+op, func(t *testing.T) {
				c, _ := expiredEntry(t, mode, cache.Options{StaleIfError: time.Hour, FailSafeThrottle: time.Minute})
				h := newHeld(t, "")
				h.err = errors.New("origin down")
				ctx := bounded(t, 10*time.Second)
				res := async(func() valErr[cache.Result[string]] {
					r, err := c.Fetch(ctx, "k", h.fn)
					return valErr[cache.Result[string]]{r, err}
				})
				within(t, h.calls, 5*time.Second, "the compute starting")
				if op == "set" {
					if err := c.Set(ctx, "k", "set"); err != nil {
						t.Fatal(err)
					}
				} else if err := c.Delete(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				h.Release()
				within(t, res, 5*time.Second, "the failing compute answering")
				v, found, err := c.Get(ctx, "k")
				switch {
				case err != nil:
					t.Fatal(err)
				case op == "set" && (!found || v != "set"):
					t.Fatalf("after Set + failed compute: %q %v, want \"set\"", v, found)
				case op == "delete" && found:
					t.Fatalf("after Delete + failed compute: %q found: the re-arm resurrected it", v)
				}
			})
		}
	}
}

// Pins (guarantee 6): the fail-safe throttle holds on the batch path and
// mixed with the single-key path: 3 replicas x 40 callers, half of them
// GetOrComputeMany, the origin failing at once: one origin call per
// throttle, every caller answered with the stale value.
func TestFailSafeThrottleBatchAndSingle(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, StaleIfError: time.Hour, FailSafeThrottle: time.Minute}
	clk := writeStale(t, redistest.Client(t), ns, "k", "old", opts)
	caches := replicas[string](t, 3, opts)
	clocked(clk, caches...)
	var calls atomic.Int32
	down := errors.New("origin down")
	burst := func() {
		t.Helper()
		var wg sync.WaitGroup
		for _, c := range caches {
			for g := range 40 {
				wg.Go(func() {
					ctx := bounded(t, 10*time.Second)
					if g%2 == 0 {
						m, err := c.GetOrComputeMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
							calls.Add(1)
							return nil, down
						})
						if err != nil || m["k"] != "old" {
							t.Errorf("batch: %v %v", m, err)
						}
						return
					}
					r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { calls.Add(1); return "", down })
					if err != nil || r.Value != "old" || r.Outcome != cache.Stale {
						t.Errorf("single: %+v %v", r, err)
					}
				})
			}
		}
		waitGroupWithin(t, &wg, 20*time.Second, "the burst")
	}
	oneCallPerThrottle(t, clk, time.Minute, &calls, burst)
}

// Pins (guarantee 6 vs the StaleIfError bound): a fail-safe re-arm must
// not make a value answer past its own StaleIfError window. StaleIfError
// 10s, FailSafeThrottle 1m: 30s after the window ended, the origin should be
// tried (and its error returned), not the re-armed value served.
func TestFailSafeRearmOutlivesStaleIfError(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			c, clk := expiredEntry(t, mode, cache.Options{StaleIfError: 10 * time.Second, FailSafeThrottle: time.Minute})
			var calls atomic.Int32
			down := errors.New("origin down")
			failing := func(context.Context) (string, error) { calls.Add(1); return "", down }
			if r, err := c.Fetch(bounded(t, 5*time.Second), "k", failing); err != nil || r.Value != "old" {
				t.Fatalf("inside StaleIfError: %+v %v", r, err)
			}
			clk.Advance(30 * time.Second) // 30s past TTL+StaleIfError
			r, err := c.Fetch(bounded(t, 5*time.Second), "k", failing)
			if err == nil {
				t.Fatalf("30s past the StaleIfError window: %+v (age %s), origin calls %d: served past its stale-if-error bound", r, r.Age, calls.Load())
			}
		})
	}
}
