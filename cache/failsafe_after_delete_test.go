package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
)

// A value deleted while a caller waited for the key may not stand in for
// that caller's failed compute, nor be re-armed by the fail-safe: it would
// bring the deleted value back to the whole fleet (found by the robustness
// suite, seed 1796412755679138755 of redis-persist-busyerror: after a Set
// and a Delete, the fleet served the older value as fail-safe for 100 ms).
func TestFailSafeNeverBringsBackADeletedValue(t *testing.T) {
	opts := cache.Options{TTL: time.Second, StaleIfError: time.Hour, FailSafeThrottle: time.Minute,
		WaitTimeout: time.Minute, PollInterval: 20 * time.Millisecond}
	rs := replicas[string](t, 3, opts)
	a, b, holder := rs[0], rs[1], rs[2]
	clk := cache.NewClock()
	for _, c := range rs {
		cache.UseClock(c, clk)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Set(ctx, "k", "old"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second) // expired, inside its stale-if-error window

	// The holder keeps the key's claim while a waits for it.
	started, release := make(chan struct{}), make(chan struct{})
	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		_, _ = holder.Fetch(ctx, "k", func(context.Context) (string, error) {
			close(started)
			<-release
			return "holder's", nil
		})
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the holder never computed")
	}
	errOrigin := errors.New("origin down")
	type fetched struct {
		r   cache.Result[string]
		err error
	}
	got := make(chan fetched, 1)
	go func() {
		r, err := a.Fetch(ctx, "k", func(context.Context) (string, error) { return "", errOrigin })
		got <- fetched{r, err}
	}()
	leakcheck.WaitBlocked(t, "cache.(*Cache[...]).wait(", 1, 10*time.Second)

	// The key is deleted (its claim taken away): a takes the claim over,
	// its compute fails, and the value it read before may not answer.
	if err := b.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	var f fetched
	select {
	case f = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter never answered")
	}
	close(release)
	<-holderDone
	if f.r.Value == "old" || !errors.Is(f.err, errOrigin) {
		t.Errorf("waiter: %+v %v, want the origin's error and not the deleted value", f.r, f.err)
	}
	for i, c := range rs {
		if v, found, err := c.Get(ctx, "k"); err != nil || found && v == "old" {
			t.Errorf("replica %d Get after the Delete: %q %v %v", i, v, found, err)
		}
	}
}
