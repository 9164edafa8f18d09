package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// SoftTimeout: the compute that runs past it goes on in the background and
// fills (never over a Set or Delete), later callers get the stale value
// without a second origin call, Close cancels it, and a background refresh
// is not cut by it.

// Pins (guarantee 2): the soft-timeout background fill never overwrites a
// Set or Delete that returned while it computed.
func TestSoftTimeoutFillFencedBySetDelete(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		for _, op := range []string{"set", "delete"} {
			t.Run(mode+"/"+op, func(t *testing.T) {
				c, _ := expiredEntry(t, mode, cache.Options{StaleIfError: time.Hour, SoftTimeout: 20 * time.Millisecond})
				h := newHeld(t, "late")
				ctx := bounded(t, 10*time.Second)
				r, err := c.Fetch(ctx, "k", h.fn)
				if err != nil || !errors.Is(r.Err, cache.ErrSoftTimeout) {
					t.Fatalf("%+v %v", r, err)
				}
				if op == "set" {
					if err := c.Set(ctx, "k", "set"); err != nil {
						t.Fatal(err)
					}
				} else if err := c.Delete(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				h.Release()
				within(t, h.returned, 5*time.Second, "the background compute returning")
				eventually(t, 5*time.Second, func() bool { return c.Stats().FencedOut == 1 }, func() string {
					return "the background fill was not fenced out"
				})
				v, found, err := c.Get(ctx, "k")
				switch {
				case err != nil:
					t.Fatal(err)
				case op == "set" && v != "set":
					t.Fatalf("after Set: %q %v", v, found)
				case op == "delete" && found:
					t.Fatalf("after Delete: %q found", v)
				}
			})
		}
	}
}

// Pins (guarantees 1, 4 / issue 15 SoftTimeout): once a compute has run
// past SoftTimeout, a later caller (same replica, or another replica) of the
// same key should get the stale value within about SoftTimeout too, and must
// not start a second origin call while the first is still running.
func TestSoftTimeoutLaterCallersGetStaleWithoutASecondCompute(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			opts := cache.Options{StaleIfError: time.Hour, SoftTimeout: 50 * time.Millisecond, WaitTimeout: time.Second}
			c, clk := expiredEntry(t, mode, opts)
			others := []*cache.Cache[string]{c}
			if mode == "redis" {
				opts.Namespace = c.Namespace()
				others = append(others, clocked(clk, newCache[string](t, redistest.Client(t), opts)))
			}
			var calls atomic.Int32
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			slow := func(context.Context) (string, error) {
				calls.Add(1)
				<-release
				return "new", nil
			}
			if r, err := c.Fetch(bounded(t, 10*time.Second), "k", slow); err != nil || !errors.Is(r.Err, cache.ErrSoftTimeout) {
				t.Fatalf("first caller: %+v %v", r, err)
			}
			for i, o := range others {
				start := time.Now()
				r, err := o.Fetch(bounded(t, 3*time.Second), "k", slow)
				took := time.Since(start)
				if err != nil || r.Value != "old" || took > 500*time.Millisecond {
					t.Errorf("later caller on replica %d: %+v %v after %s (SoftTimeout 50ms, WaitTimeout 1s)", i, r, err, took.Round(time.Millisecond))
				}
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("origin called %d times while the first compute still runs, want 1", n)
			}
		})
	}
}

// Pins (guarantee 8): Close cancels background work and waits for it. A
// soft-timeout compute whose fn honours its context must end promptly on
// Close, not hold Close for ComputeTimeout.
func TestCloseCancelsSoftTimeoutCompute(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			c, _ := expiredEntry(t, mode, cache.Options{StaleIfError: time.Hour, SoftTimeout: 20 * time.Millisecond, ComputeTimeout: 4 * time.Second})
			h := newHeld(t, "new")
			h.honourCtx = true
			r, err := c.Fetch(bounded(t, 10*time.Second), "k", h.fn)
			if err != nil || !errors.Is(r.Err, cache.ErrSoftTimeout) {
				t.Fatalf("%+v %v", r, err)
			}
			closed := async(func() error { return c.Close() })
			res, ok := tryWithin(closed, time.Second)
			if !ok {
				res = within(t, closed, 10*time.Second, "Close returning at all")
				t.Fatalf("Close took %s with a soft-timeout compute in flight (its fn honours ctx): the compute's ctx is not cancelled by Close", res.took.Round(time.Millisecond))
			}
		})
	}
}

// Pins (background refresh + SoftTimeout): a Stale-window refresh whose
// compute runs past SoftTimeout must still fill when it ends. Nobody waits
// for a refresh, so SoftTimeout does not apply to it (it once handed the
// compute the refresh's context, cancelled when the refresh returned).
func TestSoftTimeoutBackgroundRefreshFills(t *testing.T) {
	for _, honour := range []bool{false, true} {
		t.Run(map[bool]string{false: "fn ignores ctx", true: "fn honours ctx"}[honour], func(t *testing.T) {
			ns := redistest.Prefix(t)
			opts := cache.Options{Namespace: ns, Stale: time.Hour, StaleIfError: time.Hour, SoftTimeout: 20 * time.Millisecond}
			clk := writeStale(t, redistest.Client(t), ns, "k", "old", opts)
			c := clocked(clk, newCache[string](t, redistest.Client(t), opts))
			h := newHeld(t, "new")
			h.honourCtx = honour
			r, err := c.Fetch(bounded(t, 5*time.Second), "k", h.fn)
			if err != nil || r.Value != "old" || r.Outcome != cache.Stale {
				t.Fatalf("%+v %v", r, err)
			}
			within(t, h.calls, 5*time.Second, "the refresh computing")
			h.Release()
			within(t, h.returned, 5*time.Second, "the compute returning")
			var v string
			eventually(t, 3*time.Second, func() bool {
				v, _, _ = c.Get(context.Background(), "k")
				return v == "new"
			}, func() string {
				return "the refresh's value never filled: Get=" + v + " stats " + fmtStats(c.Stats())
			})
			if st := c.Stats(); st.SoftTimeouts != 0 || st.FailSafe != 0 {
				t.Fatalf("a refresh ran into SoftTimeout or the fail-safe: %s", fmtStats(st))
			}
		})
	}
}

func fmtStats(s cache.Stats) string {
	return fmt.Sprintf("refreshes=%d computes=%d computeErrors=%d failSafe=%d softTimeouts=%d redisErrors=%d refills=%d",
		s.Refreshes, s.Computes, s.ComputeErrors, s.FailSafe, s.SoftTimeouts, s.RedisErrors, s.Refills)
}
