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

// The cache runs unchanged on a real 3-master Redis Cluster: every script
// touches one slot ({ns:k}), and fills reach waiters on other nodes.
func TestClusterStampedeOneCompute(t *testing.T) {
	ns := redistest.Prefix(t)
	var caches []*cache.Cache[string]
	for range 4 {
		caches = append(caches, newCache[string](t, redistest.ClusterClient(t), cache.Options{Namespace: ns}))
	}
	// Keys spread over the slots, so every node takes part.
	for i := range 6 {
		key := fmt.Sprint("hot-", i)
		o := &origin[string]{value: "v-" + key, delay: 50 * time.Millisecond}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, c := range caches {
			for range 50 {
				wg.Go(func() {
					<-start
					if v, err := c.GetOrCompute(context.Background(), key, o.fn); err != nil || v != "v-"+key {
						t.Errorf("%s: %q %v", key, v, err)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if n := o.calls.Load(); n != 1 {
			t.Fatalf("%s: origin ran %d times on the cluster", key, n)
		}
	}
}

func TestClusterSetDeleteBatchAndL1(t *testing.T) {
	ns := redistest.Prefix(t)
	a := newCache[string](t, redistest.ClusterClient(t), cache.Options{Namespace: ns, L1Size: 100})
	b := newCache[string](t, redistest.ClusterClient(t), cache.Options{Namespace: ns, L1Size: 100})
	ctx := context.Background()
	if err := a.Set(ctx, "k", "one"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's L1", func() bool {
		v, _, _ := b.Get(ctx, "k")
		return v == "one" && b.Stats().L1Entries == 1
	})
	if err := a.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the invalidation across the cluster", func() bool { return b.Stats().L1Entries == 0 })
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprint("batch-", i)
	}
	o := &batchOrigin{}
	got, err := a.GetOrComputeMany(ctx, keys, o.fn)
	if err != nil || len(got) != len(keys) || len(o.calls) != 1 {
		t.Fatalf("%d values, %v, %d calls", len(got), err, len(o.calls))
	}
	got, err = b.GetOrComputeMany(ctx, keys, o.fn)
	if err != nil || len(got) != len(keys) || len(o.calls) != 1 {
		t.Fatalf("second batch: %d values, %v, %d calls", len(got), err, len(o.calls))
	}
}
