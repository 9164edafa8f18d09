package cache_test

// Background refresh (refresh.go): a panic in it is recovered and counted,
// and the value it was refreshing is still served.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Guarantee (issue 14): a panic in a background refresh, stale or early
// (XFetch), is recovered and counted in Stats().ComputeErrors; the process
// keeps running and the served value is unharmed. In Redis mode and in
// process-local mode.
func TestBackgroundRefreshPanicRecovered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		local bool
		early bool
	}{{"stale/redis", false, false}, {"early/redis", false, true}, {"stale/local", true, false}, {"early/local", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := cache.Options{TTL: time.Hour, Stale: time.Hour}
			if tc.early {
				opts.Beta = 1e9
			}
			var c *cache.Cache[string]
			if tc.local {
				c = newCache[string](t, nil, opts)
			} else {
				opts.Namespace = redistest.Prefix(t)
				c = newCache[string](t, redistest.Client(t), opts)
			}
			clk := cache.NewClock()
			cache.UseClock(c, clk)
			ctx := bounded(t, 10*time.Second)
			// The first value: short-lived for a stale refresh, with a
			// compute time for an early one.
			first := func(ctx context.Context) (string, error) {
				if !tc.early {
					cache.SetTTL(ctx, time.Minute)
				}
				select { // the origin's own latency: XFetch needs a compute time
				case <-time.After(2 * time.Millisecond):
				case <-ctx.Done():
					return "", ctx.Err()
				}
				return "first", nil
			}
			if v, err := c.GetOrCompute(ctx, "k", first); err != nil || v != "first" {
				t.Fatalf("first compute: %q, %v", v, err)
			}
			if !tc.early {
				clk.Advance(time.Minute + time.Millisecond) // past the TTL: stale
			}
			before := c.Stats().ComputeErrors
			entered := make(chan struct{}, 16)
			boom := func(context.Context) (string, error) {
				entered <- struct{}{}
				panic("refresh exploded")
			}
			r, err := c.Fetch(ctx, "k", boom)
			want := cache.Stale
			if tc.early {
				want = cache.Hit
			}
			if err != nil || r.Value != "first" || r.Outcome != want {
				t.Fatalf("a read that triggers the refresh: %+v, %v; want %q as %v", r, err, "first", want)
			}
			within(t, entered, 5*time.Second, "the background refresh running")
			eventually(t, 5*time.Second, func() bool { return c.Stats().ComputeErrors > before }, func() string {
				return fmt.Sprintf("the refresh's panic was not counted in ComputeErrors: %+v", c.Stats())
			})
			// Still serving, and a later refresh can run (the key is not
			// stuck) once the fail-safe throttle that the failure armed
			// (on a stale value) has passed.
			if !tc.early {
				eventually(t, 5*time.Second, func() bool { return c.Stats().FailSafe == 1 }, func() string {
					return fmt.Sprintf("the stale value was not re-armed after the failed refresh: %+v", c.Stats())
				})
			}
			clk.Advance(2 * time.Second)
			ok := &origin[string]{value: "second"}
			eventually(t, 5*time.Second, func() bool {
				r, err := c.Fetch(ctx, "k", ok.fn)
				return err == nil && (r.Value == "second" || ok.calls.Load() > 0)
			}, func() string { return "no refresh ran after the panicked one" })
		})
	}
}
