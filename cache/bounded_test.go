package cache

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// 10,000 distinct keys through two replicas that race for each of them:
// afterwards nothing is left in flight — no shared reads, no singleflight
// calls, no waiter subscriptions, no background refreshes. A leak per key
// would leave thousands; 100,000 keys found nothing more and took 83 s of
// CI's race pass, 20,000 took 13 s.
func TestResourcesStayBoundedOverManyKeys(t *testing.T) {
	const keys = 10_000
	ns := redistest.Prefix(t)
	// A generous budget: 40,000 calls from 32 goroutines under the race
	// detector on a shared machine stall some Redis steps past 100 ms.
	opts := Options{Namespace: ns, RedisTimeout: 5 * time.Second}
	a, err := New[string](redistest.Client(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New[string](redistest.Client(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var next, computes atomic.Int64
	fn := func(context.Context) (string, error) { computes.Add(1); return "v", nil }
	var maxSubs atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > keys {
					return
				}
				k := strconv.FormatInt(i, 10)
				var inner sync.WaitGroup
				for _, c := range []*Cache[string]{a, b} {
					inner.Go(func() {
						if v, err := c.GetOrCompute(context.Background(), k, fn); err != nil || v != "v" {
							t.Errorf("%s: %q %v", k, v, err)
						}
					})
				}
				inner.Wait()
				if i%1000 == 0 {
					// The waiters' channels: less those L1 tracks (up to
					// twice its size, bounded by design).
					n := int64(a.redis.p.Notifier().Subscriptions() + b.redis.p.Notifier().Subscriptions() - a.l1Tracked() - b.l1Tracked())
					for p := maxSubs.Load(); n > p && !maxSubs.CompareAndSwap(p, n); p = maxSubs.Load() {
					}
				}
			}
		})
	}
	wg.Wait()
	if n := computes.Load(); n != keys {
		t.Fatalf("%d computes for %d keys", n, keys)
	}
	for name, c := range map[string]*Cache[string]{"a": a, "b": b} {
		flights := c.redis.p.Flights()
		// Background work (a re-read of the invalidation marks, spawned by
		// a hit when their trust is half gone) ends on its own, and
		// unsubscribe confirmations arrive asynchronously: wait for both,
		// bounded.
		refreshing, waitSubs := 0, 0
		for deadline := time.Now().Add(10 * time.Second); ; waitForConfirmations() {
			refreshing = 0
			c.refreshing.Range(func(any, any) bool { refreshing++; return true })
			// Less the invalidation channel, subscribed for good, and the
			// channels L1 tracks.
			waitSubs = c.redis.p.Notifier().Subscriptions() - 1 - c.l1Tracked()
			if refreshing == 0 && waitSubs == 0 || time.Now().After(deadline) {
				break
			}
		}
		if flights != 0 || refreshing != 0 || waitSubs != 0 {
			t.Fatalf("%s after %d keys: %d read flights, %d refreshes, %d subscriptions left", name, keys, flights, refreshing, waitSubs)
		}
	}
	if m := maxSubs.Load(); m > 64 {
		t.Fatalf("up to %d channel subscriptions at once for 16 workers", m)
	}
	t.Logf("peak waiter subscriptions sampled: %d", maxSubs.Load())
}
