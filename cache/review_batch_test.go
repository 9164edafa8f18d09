package cache_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// Review (guarantee 1): 4 replicas x 60 goroutines, mixing GetOrCompute and
// GetOrComputeMany over overlapping keys: each key computed once per fleet.
func TestReviewOneComputePerKeyMixedPaths(t *testing.T) {
	for _, l1 := range []int{0, 100} {
		t.Run(fmt.Sprintf("L1=%d", l1), func(t *testing.T) {
			caches := replicas[string](t, 4, cache.Options{L1Size: l1})
			var mu sync.Mutex
			counts := map[string]int{}
			count := func(k string) {
				mu.Lock()
				counts[k]++
				mu.Unlock()
			}
			keys := []string{"a", "b", "c", "d", "e"}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for ci, c := range caches {
				for g := range 60 {
					wg.Go(func() {
						<-start
						ctx := bounded(t, 20*time.Second)
						if (ci+g)%2 == 0 {
							ks := []string{keys[g%5], keys[(g+1)%5], keys[(g+3)%5]}
							m, err := c.GetOrComputeMany(ctx, ks, func(_ context.Context, missing []string) (map[string]string, error) {
								time.Sleep(20 * time.Millisecond) // the origin's latency
								out := map[string]string{}
								for _, k := range missing {
									count(k)
									out[k] = "v" + k
								}
								return out, nil
							})
							for _, k := range ks {
								if err != nil || m[k] != "v"+k {
									t.Errorf("batch %v: %v %v", ks, m, err)
									return
								}
							}
							return
						}
						k := keys[g%5]
						v, err := c.GetOrCompute(ctx, k, func(context.Context) (string, error) {
							time.Sleep(20 * time.Millisecond)
							count(k)
							return "v" + k, nil
						})
						if err != nil || v != "v"+k {
							t.Errorf("%s: %q %v", k, v, err)
						}
					})
				}
			}
			close(start)
			waitGroupWithin(t, &wg, 30*time.Second, "all callers answering")
			for _, k := range keys {
				if counts[k] != 1 {
					t.Errorf("key %s computed %d times across the fleet, want 1 (all: %v)", k, counts[k], counts)
				}
			}
		})
	}
}

// Review (guarantee 5): a batch fn that panics, calls runtime.Goexit, or
// leaves keys out of its result releases every claim at once: another
// replica computes those keys immediately (LeaseTTL is 30s here, so a
// wedged claim would hold it until its WaitTimeout).
func TestReviewBatchClaimsReleased(t *testing.T) {
	cases := map[string]func(context.Context, []string) (map[string]string, error){
		"panic":   func(context.Context, []string) (map[string]string, error) { panic("boom") },
		"goexit":  func(context.Context, []string) (map[string]string, error) { runtime.Goexit(); return nil, nil },
		"missing": func(context.Context, []string) (map[string]string, error) { return map[string]string{"x": "vx"}, nil },
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			caches := replicas[string](t, 2, cache.Options{LeaseTTL: 30 * time.Second, WaitTimeout: 20 * time.Second})
			m, err := caches[0].GetOrComputeMany(bounded(t, 10*time.Second), []string{"x", "y", "z"}, bad)
			if err == nil {
				t.Fatalf("bad batch fn: %v, no error", m)
			}
			var calls atomic.Int32
			for _, k := range []string{"y", "z"} {
				start := time.Now()
				v, err := caches[1].GetOrCompute(bounded(t, 10*time.Second), k, func(context.Context) (string, error) {
					calls.Add(1)
					return "w" + k, nil
				})
				if err != nil || v != "w"+k || time.Since(start) > time.Second {
					t.Errorf("%s on the other replica: %q %v after %s (claim not released?)", k, v, err, time.Since(start))
				}
			}
			if name != "missing" {
				start := time.Now()
				v, err := caches[1].GetOrCompute(bounded(t, 10*time.Second), "x", func(context.Context) (string, error) { return "wx", nil })
				if err != nil || v != "wx" || time.Since(start) > time.Second {
					t.Errorf("x on the other replica: %q %v after %s", v, err, time.Since(start))
				}
			}
		})
	}
}

// Review (guarantee 4): a batch caller's deadline is honoured while another
// replica holds the claim and fn ignores its context.
func TestReviewBatchDeadlineWhileOtherReplicaHolds(t *testing.T) {
	caches := replicas[string](t, 2, cache.Options{})
	h := newHeld(t, "v")
	go func() { _, _ = caches[0].GetOrCompute(bounded(t, 20*time.Second), "k", h.fn) }()
	within(t, h.calls, 5*time.Second, "the holder computing")
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := caches[1].GetOrComputeMany(ctx, []string{"k", "j"}, h.batch("b"))
	if took := time.Since(start); took > 400*time.Millisecond {
		t.Fatalf("batch with an 80ms deadline returned after %s (%v)", took, err)
	}
	h.Release()
}
