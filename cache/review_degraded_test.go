package cache_test

import (
	"context"
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
			p, caches := proxied(t, 1)
			c := caches[0]
			clk := cache.NewClock()
			clocked(clk, c)
			ctx := context.Background()
			p.SetPartition(true)
			waitFor(t, "the breaker to open", func() bool {
				_, _, _ = c.Get(ctx, "other")
				return c.Stats().BreakerOpen
			})
			r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { return "A", nil })
			if err != nil || r.Value != "A" || r.Outcome != cache.Degraded {
				t.Fatalf("outage 1: %+v %v", r, err)
			}
			p.SetPartition(false)
			waitFor(t, "the breaker to close", func() bool {
				_, _, _ = c.Get(ctx, "other")
				return !c.Stats().BreakerOpen
			})
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
