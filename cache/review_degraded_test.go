package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// Review (guarantees 3, 7): a value kept during an outage must never answer
// after a Set (or Delete) of the key returned. Outage 1 keeps "A"; Redis
// comes back; Set("B") returns; Redis blips again inside DegradedTTL: the
// replica must not answer the pre-Set "A".
func TestReviewKeptValueAfterSet(t *testing.T) {
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
			if op == "set" {
				if err := c.Set(ctx, "k", "B"); err != nil {
					t.Fatal(err)
				}
			} else if err := c.Delete(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			p.SetPartition(true) // a second blip, inside DegradedTTL (the clock stands still)
			r, err = c.Fetch(bounded(t, 5*time.Second), "k", func(context.Context) (string, error) { return "C", nil })
			if err == nil && r.Value == "A" {
				t.Fatalf("after %s returned, the replica answered the value kept before it: %+v", op, r)
			}
		})
	}
}

// Review (guarantee 6 during an outage / issue 15 "at most once per short
// local TTL"): Redis down, the origin failing, a kept value inside its
// StaleIfError window: sequential callers should not each call the origin
// (no throttle is applied to degraded computes).
func TestReviewDegradedFailingOriginThrottled(t *testing.T) {
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
