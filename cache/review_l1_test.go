package cache_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// Review (guarantee 3 with L1, batch and single paths): readers hammer a key
// through GetOrComputeMany, Get and Fetch while the writer Sets v-n and then
// Deletes it; right after Delete returns, the writer's own replica must not
// answer v-n from any path.
func TestReviewL1NoOldValueAfterDeleteAllPaths(t *testing.T) {
	caches := replicas[string](t, 1, cache.Options{L1Size: 1000, TTL: time.Hour})
	w := caches[0]
	ctx := bounded(t, 60*time.Second)
	eventually(t, 5*time.Second, func() bool {
		_ = w.Set(ctx, "warm", "x")
		_, _, _ = w.Get(ctx, "warm")
		return w.Stats().L1Hits > 0
	}, func() string { return "L1 never synced" })
	var stop atomic.Bool
	var wg sync.WaitGroup
	compute := func(context.Context) (string, error) { return "computed", nil }
	for g := range 6 {
		wg.Go(func() {
			for !stop.Load() {
				switch g % 3 {
				case 0:
					_, _ = w.GetOrComputeMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
						return map[string]string{"k": "computed"}, nil
					})
				case 1:
					_, _, _ = w.Get(ctx, "k")
				default:
					_, _ = w.Fetch(ctx, "k", compute)
				}
			}
		})
	}
	bad := 0
	for n := range 100 {
		if err := w.Set(ctx, "k", versioned(n)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // let readers pick the value up
		if err := w.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		m, _ := w.GetOrComputeMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
			return map[string]string{"k": "computed"}, nil
		})
		v, found, _ := w.Get(ctx, "k")
		r, _ := w.Fetch(ctx, "k", compute)
		if m["k"] == versioned(n) || (found && v == versioned(n)) || r.Value == versioned(n) {
			bad++
		}
		_ = w.Delete(ctx, "k")
	}
	stop.Store(true)
	waitGroupWithin(t, &wg, 10*time.Second, "readers stopping")
	if bad > 0 {
		t.Fatalf("%d of 100 Deletes followed by the deleted value on this replica", bad)
	}
}
