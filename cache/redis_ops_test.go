package cache_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestGetSetDeleteAcrossReplicas(t *testing.T) {
	caches := replicas[[]string](t, 2, cache.Options{})
	ctx := context.Background()
	if _, found, err := caches[0].Get(ctx, "k"); found || err != nil {
		t.Fatalf("empty: found=%v err=%v", found, err)
	}
	if err := caches[0].Set(ctx, "k", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	v, found, err := caches[1].Get(ctx, "k")
	if err != nil || !found || len(v) != 2 || v[1] != "b" {
		t.Fatalf("other replica: %v %v %v", v, found, err)
	}
	r, err := caches[1].Fetch(ctx, "k", func(context.Context) ([]string, error) { return nil, nil })
	if err != nil || r.Outcome != cache.Hit || r.Age < 0 {
		t.Fatalf("%+v %v", r, err)
	}
	if err := caches[1].Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := caches[0].Get(ctx, "k"); found {
		t.Fatal("found after Delete")
	}
}

// A Set wakes replicas waiting on the key's lease holder.
func TestSetWakesWaiters(t *testing.T) {
	caches := replicas[string](t, 2, cache.Options{WaitTimeout: time.Minute})
	slow := &origin[string]{value: "computed", started: make(chan struct{}, 1), release: make(chan struct{})}
	go func() { _, _ = caches[0].GetOrCompute(context.Background(), "k", slow.fn) }()
	<-slow.started
	got := make(chan cache.Result[string])
	go func() {
		r, _ := caches[1].Fetch(context.Background(), "k", func(context.Context) (string, error) { return "other", nil })
		got <- r
	}()
	leakcheck.WaitBlocked(t, "cache.(*Cache[...]).wait(", 1, 10*time.Second)
	if err := caches[0].Set(context.Background(), "k", "set"); err != nil {
		t.Fatal(err)
	}
	r := <-got
	close(slow.release)
	// The waiter answers with the Set's value while the holder still
	// computes. Woken by the Set's announcement it says Waited; on a busy
	// machine its poll may read the value first and say Hit: either way
	// the Set reached it, which is what this pins.
	if (r.Outcome != cache.Waited && r.Outcome != cache.Hit) || r.Value != "set" {
		t.Fatalf("%+v", r)
	}
}

// Stale values are served at once while one caller refreshes in the background.
func TestStaleServedWhileOneRefreshes(t *testing.T) {
	caches := replicas[int](t, 3, cache.Options{TTL: time.Minute, Stale: time.Hour})
	clk := cache.NewClock()
	clocked(clk, caches...)
	ctx := context.Background()
	if err := caches[0].Set(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute + time.Millisecond) // the entry is stale
	o := &origin[int]{value: 2, release: make(chan struct{})}
	var wg sync.WaitGroup
	for _, c := range caches {
		for range 30 {
			wg.Go(func() {
				r, err := c.Fetch(ctx, "k", o.fn)
				if err != nil || r.Outcome != cache.Stale || r.Value != 1 {
					t.Errorf("%+v %v", r, err)
				}
			})
		}
	}
	wg.Wait() // every caller was answered while the refresh is held
	close(o.release)
	waitFor(t, "the refresh to land", func() bool {
		v, found, err := caches[0].Get(ctx, "k")
		return err == nil && found && v == 2
	})
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("refresh ran %d times across the fleet, want 1", n)
	}
	r, err := caches[2].Fetch(ctx, "k", o.fn)
	if err != nil || r.Value != 2 || r.Outcome != cache.Hit {
		t.Fatalf("after the refresh: %+v %v", r, err)
	}
}

// Close cancels a background refresh in flight and waits for it.
func TestCloseCancelsBackgroundRefresh(t *testing.T) {
	c, err := cache.New[int](redistest.Client(t), cache.Options{Namespace: redistest.Prefix(t), TTL: time.Minute, Stale: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clk := cache.NewClock()
	cache.UseClock(c, clk)
	ctx := context.Background()
	if err := c.Set(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute + time.Millisecond) // the entry is stale
	started := make(chan struct{})
	var cause error
	r, err := c.Fetch(ctx, "k", func(ctx context.Context) (int, error) {
		close(started)
		<-ctx.Done()
		cause = ctx.Err()
		return 0, ctx.Err()
	})
	if err != nil || r.Outcome != cache.Stale {
		t.Fatalf("%+v %v", r, err)
	}
	<-started
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if cause == nil {
		t.Fatal("Close returned before the refresh ended")
	}
}
