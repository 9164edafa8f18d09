package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/faultproxy"
)

// While Redis is unreachable a process computes a key at most once per
// DegradedTTL, a value it computed answers for a failing origin within
// StaleIfError, and when Redis is back the kept value never overrides
// Redis' own.
func TestDegradedKeepsWhatItComputed(t *testing.T) {
	t.Parallel()
	p, caches := proxied(t, 1)
	c := caches[0]
	clk := cache.NewClock()
	clocked(clk, c)
	ctx := context.Background()
	againWhileUnavailable(t, "Set before the outage", func() error { return c.Set(ctx, "k", "in redis") })
	p.SetPartition(true)
	waitBreaker(t, c, true)
	var calls atomic.Int32
	fn := func(context.Context) (string, error) { calls.Add(1); return "computed", nil }
	for i := range 5 {
		r, err := c.Fetch(ctx, "k", fn)
		if err != nil || r.Value != "computed" || r.Outcome != cache.Degraded {
			t.Fatalf("call %d during the outage: %+v %v", i, r, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d computes within one DegradedTTL, want 1", n)
	}
	// Past DegradedTTL it is computed again.
	clk.Advance(2 * time.Second)
	r, err := c.Fetch(ctx, "k", fn)
	if err != nil || r.Outcome != cache.Degraded || calls.Load() != 2 {
		t.Fatalf("past DegradedTTL: %+v %v, %d computes", r, err, calls.Load())
	}
	p.SetPartition(false)
	waitBreaker(t, c, false)
	if r := fetchFromRedis(t, c, "k", fn); r.Value != "in redis" || r.Outcome != cache.Hit {
		t.Fatalf("after the outage: %+v: Redis' value must win", r)
	}
}

// A value kept while Redis is down answers for a failing origin inside its
// StaleIfError window.
func TestDegradedKeptValueAnswersOnError(t *testing.T) {
	_, c, clk := outage(t, cache.Options{StaleIfError: time.Hour})
	ctx := context.Background()
	if r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { return "kept", nil }); err != nil || r.Outcome != cache.Degraded {
		t.Fatalf("%+v %v", r, err)
	}
	clk.Advance(2 * time.Second)
	down := errors.New("origin down")
	r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { return "", down })
	if err != nil || r.Value != "kept" || !errors.Is(r.Err, down) {
		t.Fatalf("origin failing during the outage: %+v %v: want the kept value", r, err)
	}
}

// outage returns a cache (with opts) on a test clock whose link to Redis
// the proxy has cut, once its breaker is open.
func outage(t *testing.T, opts cache.Options) (*faultproxy.Proxy, *cache.Cache[string], *cache.Clock) {
	t.Helper()
	p, caches := proxiedWith(t, 1, opts)
	c := caches[0]
	clk := cache.NewClock()
	clocked(clk, c)
	p.SetPartition(true)
	waitBreaker(t, c, true)
	return p, c, clk
}

// waitBreaker waits until c's breaker is open (or closed), driving it with
// reads of another key: a read against the partition counts a failure, and
// past the cooldown a read starts the background probe.
func waitBreaker(t *testing.T, c *cache.Cache[string], open bool) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the breaker open=%v", open), func() bool {
		_, _, _ = c.Get(context.Background(), "other")
		return c.Stats().BreakerOpen == open
	})
}

// Pins (guarantees 3, 7): a value kept during an outage must never answer
// after a Set (or Delete) of the key returned. Outage 1 keeps "A"; Redis
// comes back; Set("B") returns; Redis blips again inside DegradedTTL: the
// replica must not answer the pre-Set "A".
func TestDegradedKeptValueNeverAnswersAfterSet(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"set", "delete"} {
		t.Run(op, func(t *testing.T) {
			p, c, _ := outage(t, cache.Options{})
			ctx := context.Background()
			r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { return "A", nil })
			if err != nil || r.Value != "A" || r.Outcome != cache.Degraded {
				t.Fatalf("outage 1: %+v %v", r, err)
			}
			p.SetPartition(false)
			waitBreaker(t, c, false)
			againWhileUnavailable(t, op+" with Redis back", func() error {
				if op == "set" {
					return c.Set(ctx, "k", "B")
				}
				return c.Delete(ctx, "k")
			})
			p.SetPartition(true) // a second blip, inside DegradedTTL (the clock stands still)
			r, err = c.Fetch(bounded(t, 5*time.Second), "k", func(context.Context) (string, error) { return "C", nil })
			if err == nil && r.Value == "A" {
				t.Fatalf("after %s returned, the replica answered the value kept before it: %+v", op, r)
			}
		})
	}
}

// Pins (guarantee 6 during an outage / issue 15 "at most once per short
// local TTL"): Redis down, the origin failing, a kept value inside its
// StaleIfError window: sequential callers should not each call the origin
// (no throttle is applied to degraded computes).
func TestDegradedFailingOriginThrottled(t *testing.T) {
	_, c, clk := outage(t, cache.Options{StaleIfError: time.Hour})
	ctx := context.Background()
	if r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { return "kept", nil }); err != nil || r.Outcome != cache.Degraded {
		t.Fatalf("%+v %v", r, err)
	}
	clk.Advance(2 * time.Second) // past DegradedTTL (1s)
	var calls int
	for range 10 {
		r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { calls++; return "", errors.New("origin down") })
		if err != nil || r.Value != "kept" {
			t.Fatalf("%+v %v", r, err)
		}
	}
	if calls > 1 {
		t.Fatalf("10 sequential calls during the outage called the failing origin %d times (no throttle in degraded mode)", calls)
	}
}
