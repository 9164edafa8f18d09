package cache_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
)

func TestLocalModeCoalescesAndHits(t *testing.T) {
	c := newCache[string](t, nil, cache.Options{})
	o := &origin[string]{value: "v", release: make(chan struct{})}
	const n = 100
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[cache.Outcome]int{}
	for range n {
		wg.Go(func() {
			r, err := c.Fetch(context.Background(), "k", o.fn)
			if err != nil || r.Value != "v" {
				t.Errorf("%+v %v", r, err)
			}
			mu.Lock()
			outcomes[r.Outcome]++
			mu.Unlock()
		})
	}
	leakcheck.WaitBlocked(t, doFrame, n, 10*time.Second)
	close(o.release)
	wg.Wait()
	if o.calls.Load() != 1 || outcomes[cache.Miss] != 1 || outcomes[cache.Shared] != n-1 {
		t.Fatalf("calls=%d outcomes=%v", o.calls.Load(), outcomes)
	}
	if r, err := c.Fetch(context.Background(), "k", o.fn); err != nil || r.Outcome != cache.Hit {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestLocalModeGetSetDelete(t *testing.T) {
	c := newCache[int](t, nil, cache.Options{})
	ctx := context.Background()
	if _, found, err := c.Get(ctx, "k"); found || err != nil {
		t.Fatalf("empty cache: found=%v err=%v", found, err)
	}
	if err := c.Set(ctx, "k", 5); err != nil {
		t.Fatal(err)
	}
	if v, found, err := c.Get(ctx, "k"); !found || v != 5 || err != nil {
		t.Fatalf("after Set: %d %v %v", v, found, err)
	}
	if err := c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := c.Get(ctx, "k"); found {
		t.Fatal("found after Delete")
	}
}

func TestLocalModeStaleServedAndRefreshed(t *testing.T) {
	clk := cache.NewClock()
	c := newCache[int](t, nil, cache.Options{TTL: time.Minute, Stale: time.Hour})
	cache.UseClock(c, clk)
	ctx := context.Background()
	if err := c.Set(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	refreshed := make(chan struct{})
	clk.Advance(time.Minute + time.Millisecond) // the entry is stale
	r, err := c.Fetch(ctx, "k", func(context.Context) (int, error) { close(refreshed); return 2, nil })
	if err != nil || r.Outcome != cache.Stale || r.Value != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	<-refreshed
}
