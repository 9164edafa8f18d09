package cache_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// The core promise: 4 replicas x 250 goroutines on one expired key whose
// origin takes 100ms: the origin runs once, and every caller gets its value.
func TestStampedeOneComputeAcrossReplicas(t *testing.T) {
	const nReplicas, perReplica = 4, 250
	caches := replicas[string](t, nReplicas, cache.Options{TTL: time.Minute})
	o := &origin[string]{value: "report-42", delay: 100 * time.Millisecond}

	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[cache.Outcome]int{}
	for _, c := range caches {
		for range perReplica {
			wg.Go(func() {
				<-start
				r, err := c.Fetch(context.Background(), "hot", o.fn)
				if err != nil || r.Value != "report-42" {
					t.Errorf("got %q, %v", r.Value, err)
					return
				}
				mu.Lock()
				outcomes[r.Outcome]++
				mu.Unlock()
			})
		}
	}
	close(start)
	wg.Wait()
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("origin ran %d times, want 1 (outcomes %v)", n, outcomes)
	}
	total := 0
	for _, n := range outcomes {
		total += n
	}
	if total != nReplicas*perReplica || outcomes[cache.Miss] != 1 {
		t.Fatalf("outcomes %v: want %d callers, exactly one Miss", outcomes, nReplicas*perReplica)
	}
	for o := range outcomes {
		switch o {
		case cache.Miss, cache.Shared, cache.Waited, cache.Hit:
		default:
			t.Fatalf("unexpected outcome %v in %v", o, outcomes)
		}
	}
	var computes uint64
	for _, c := range caches {
		computes += c.Stats().Computes
	}
	if computes != 1 {
		t.Fatalf("stats count %d computes, want 1", computes)
	}
	// Afterwards everybody hits.
	for _, c := range caches {
		r, err := c.Fetch(context.Background(), "hot", o.fn)
		if err != nil || r.Outcome != cache.Hit || r.Value != "report-42" {
			t.Fatalf("after the storm: %+v %v", r, err)
		}
	}
}

// Keys expire over and over under load: each expiry costs one compute.
func TestRepeatedExpiriesOneComputeEach(t *testing.T) {
	caches := replicas[int](t, 3, cache.Options{TTL: time.Hour})
	for round := 1; round <= 5; round++ {
		o := &origin[int]{value: round, delay: 20 * time.Millisecond}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, c := range caches {
			for range 50 {
				wg.Go(func() {
					<-start
					v, err := c.GetOrCompute(context.Background(), "k", o.fn)
					if err != nil || v != round {
						t.Errorf("round %d: got %d, %v", round, v, err)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if n := o.calls.Load(); n != 1 {
			t.Fatalf("round %d: origin ran %d times", round, n)
		}
		// Expire it (as the TTL would) for the next round.
		if err := caches[0].Delete(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
}

// Pins (guarantee 1): 4 replicas x 60 goroutines, mixing GetOrCompute and
// GetOrComputeMany over overlapping keys: each key computed once per fleet.
func TestOneComputePerKeySingleAndBatch(t *testing.T) {
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
