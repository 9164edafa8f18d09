package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Get, Set and Delete that Redis fails while the breaker is still closed
// say so with ErrUnavailable (what the robustness suite found them
// returning was go-redis' raw "EOF"), and a caller's own deadline stays
// its own error.
func TestDirectCallsRedisFailedAreUnavailable(t *testing.T) {
	srv, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		t.Skip(err)
	}
	defer srv.Close()
	for _, rec := range []bool{false, true} {
		o := &redis.Options{Addr: srv.Addr()}
		if rec {
			o.ContextTimeoutEnabled, o.MaxRetries = true, 1
		}
		rdb := redis.NewClient(o)
		c, err := cache.New[string](rdb, cache.Options{Namespace: "direct-errors", BreakerThreshold: 1000})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := c.Set(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
		if err := srv.Stop(); err != nil { // refuses connections from now on; pooled ones are dead
			t.Fatal(err)
		}
		calls := map[string]func(context.Context) error{
			"get":    func(ctx context.Context) error { _, _, err := c.Get(ctx, "k"); return err },
			"set":    func(ctx context.Context) error { return c.Set(ctx, "k", "w") },
			"delete": func(ctx context.Context) error { return c.Delete(ctx, "k") },
		}
		for name, call := range calls {
			err := call(ctx)
			if !errors.Is(err, cache.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("recommended=%v: %s with Redis down: %v, want ErrUnavailable and no context error", rec, name, err)
			}
			dead, cancel := context.WithCancel(ctx)
			cancel()
			if err := call(dead); !errors.Is(err, context.Canceled) {
				t.Errorf("recommended=%v: %s with its context cancelled: %v, want context.Canceled", rec, name, err)
			}
		}
		// A compute path degrades instead.
		res, err := c.Fetch(ctx, "k2", func(context.Context) (string, error) { return "x", nil })
		if err != nil || res.Outcome != cache.Degraded {
			t.Errorf("recommended=%v: Fetch with Redis down: %v %v, want Degraded", rec, res.Outcome, err)
		}
		_ = c.Close()
		_ = rdb.Close()
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	}
}

// A compute invalidated while it ran is computed again; when Redis fails
// just then, it is computed again without Redis (Outcome Degraded), not
// answered with the failed step's error (which the robustness suite found
// callers getting: "read {ns}:inv: EOF"), and an invalidation the process
// already heard of refuses the value even though the marks cannot be read
// again.
func TestRecomputeWithRedisGoneDegrades(t *testing.T) {
	p := newProxy(t)
	// L1 on: a hears b's invalidation on its subscription, so it knows the
	// compute is invalidated without reading the marks again.
	a := newCache[string](t, redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1}), cache.Options{BreakerThreshold: 1000, L1Size: 10})
	b := newCache[string](t, redistest.Client(t), cache.Options{Namespace: a.Namespace()})
	ctx := context.Background()
	// Wait until a's subscription is confirmed: its L1 then answers.
	if err := a.Set(ctx, "warm", "w"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); a.Stats().L1Hits == 0; {
		if time.Now().After(deadline) {
			t.Fatal("a's L1 never answered: not subscribed")
		}
		if _, _, err := a.Get(ctx, "warm"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // polling a state with no event to wait on
	}
	started, release := make(chan struct{}), make(chan struct{})
	calls := 0
	done := make(chan struct{})
	var res cache.Result[string]
	var err error
	go func() {
		defer close(done)
		res, err = a.Fetch(ctx, "k", func(ctx context.Context) (string, error) {
			calls++
			if calls == 1 {
				_ = cache.SetTags(ctx, "t")
				close(started)
				<-release
				return "before", nil
			}
			return "again", nil
		})
	}()
	receiveWithin(t, started)
	if err := b.InvalidateTags(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	p.SetPartition(true)
	close(release)
	receiveWithin(t, done)
	if err != nil || res.Value != "again" || res.Outcome != cache.Degraded {
		t.Fatalf("got %q %v %v, want \"again\" Degraded and no error", res.Value, res.Outcome, err)
	}
}

// receiveWithin waits for ch to close, failing the test after 10 s.
func receiveWithin(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
	}
}
