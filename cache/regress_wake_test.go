package cache_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Guarantee (issue 14): a failed or panicked compute on replica A wakes the
// waiters on replicas B and C at once (the abandon notification), so one of
// them takes over. PollInterval, WaitTimeout and LeaseTTL are a minute: a
// waiter that missed the notification would sleep at least ~2 s before its
// first poll, so all 20 waiters answering within 1 s of the failure can
// only come from the notification. Exactly one of them computes.
func TestRegressAbandonWakesWaitersAtOnce(t *testing.T) {
	for _, failure := range []string{"error", "panic"} {
		t.Run(failure, func(t *testing.T) {
			opts := cache.Options{TTL: time.Hour, PollInterval: time.Minute, WaitTimeout: time.Minute, LeaseTTL: time.Minute}
			rs := replicas[string](t, 3, opts)
			a := rs[0]
			ns := a.Namespace()
			h := newHeld(t, "")
			if failure == "panic" {
				h.panicWith = "origin exploded"
			} else {
				h.err = errors.New("origin failed")
			}
			leader := async(func() error {
				_, err := a.GetOrCompute(bounded(t, 30*time.Second), "k", h.fn)
				return err
			})
			within(t, h.calls, 5*time.Second, "A's compute starting")

			var takeovers atomic.Int32
			fn := func(context.Context) (string, error) { takeovers.Add(1); return "taken over", nil }
			results := make(chan valErr[string], 20)
			var wg sync.WaitGroup
			for _, c := range rs[1:] {
				for range 10 {
					wg.Go(func() {
						v, err := c.GetOrCompute(bounded(t, 30*time.Second), "k", fn)
						results <- valErr[string]{v, err}
					})
				}
			}
			// Both waiting replicas are subscribed to the key's channel (one
			// subscription per process) before A fails.
			addr := redistest.Addr(t)
			eventually(t, 5*time.Second, func() bool { return redistest.PlainSubscribers(t, addr, channelOf(ns, "k")) >= 2 },
				func() string { return "replicas B and C never subscribed to the key's channel" })

			failed := time.Now()
			h.Release()
			lr := within(t, leader, 5*time.Second, "A's caller returning after its compute failed")
			var pe *cache.PanicError
			if failure == "panic" && !errors.As(lr.v, &pe) {
				t.Fatalf("A's caller after a panic: %v, want a *PanicError", lr.v)
			}
			if failure == "error" && !errors.Is(lr.v, h.err) {
				t.Fatalf("A's caller after an error: %v", lr.v)
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			if _, ok := tryWithin(done, time.Second); !ok {
				t.Fatalf("the waiters on B and C were not woken by A's abandon: not all answered within 1s (PollInterval 1m); %d takeovers, stats B %+v C %+v",
					takeovers.Load(), rs[1].Stats(), rs[2].Stats())
			}
			took := time.Since(failed)
			close(results)
			for r := range results {
				if r.err != nil || r.v != "taken over" {
					t.Fatalf("a waiter: %q, %v", r.v, r.err)
				}
			}
			if n := takeovers.Load(); n != 1 {
				t.Fatalf("%d takeovers, want exactly 1", n)
			}
			t.Logf("all 20 waiters answered %s after A's compute failed", took.Round(time.Millisecond))
		})
	}
}

// Guarantee (issue 14): a panic in a background refresh, stale or early
// (XFetch), is recovered and counted in Stats().ComputeErrors; the process
// keeps running and the served value is unharmed. In Redis mode and in
// process-local mode.
func TestRegressBackgroundRefreshPanicRecovered(t *testing.T) {
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

// Guarantee (issue 14): a waiter re-reads only after Redis has confirmed its
// subscription, so a fill landing while the SUBSCRIBE is in flight is not
// lost. Replica B's subscription connection reaches Redis through +30 ms of
// latency each way (its commands do not); A
// holds the lease and fills at an offset swept across B's read, lease
// attempt, subscribe and re-read. PollInterval is a minute, so a waiter that
// missed the fill would sleep ~2 s or more; each round B must answer with A's
// value within 1.5 s of the fill, without computing.
func TestRegressWaiterSubscribedBeforeReread(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, TTL: time.Hour, PollInterval: time.Minute, WaitTimeout: time.Minute, LeaseTTL: time.Minute}
	a := newCache[string](t, redistest.Client(t), opts)
	// B's commands go straight to Redis on its one pooled connection (the
	// first dial); every later dial, which is the notifier's subscription
	// connection, goes through the slow proxy: latency between the notifier
	// and Redis only, where the order of subscribe and re-read matters.
	p, _ := proxiedClient(t, 5*time.Second)
	direct := redistest.Addr(t)
	var dials atomic.Int32
	rdb := redis.NewClient(&redis.Options{Addr: direct, PoolSize: 1, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr := p.Addr()
			if dials.Add(1) == 1 {
				addr = direct
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	b := newCache[string](t, rdb, opts)
	if err := b.Set(bounded(t, 5*time.Second), "warm", "w"); err != nil { // the pooled connection, direct
		t.Fatal(err)
	}
	p.SetLatency(30 * time.Millisecond)
	var computedByB atomic.Int32
	fnB := func(context.Context) (string, error) { computedByB.Add(1); return "b", nil }
	for i := range 25 {
		key := fmt.Sprint("k", i)
		h := newHeld(t, "from-a")
		leader := async(func() error { _, err := a.GetOrCompute(bounded(t, 30*time.Second), key, h.fn); return err })
		within(t, h.calls, 5*time.Second, "A's compute starting")
		waiter := async(func() valErr[string] {
			v, err := b.GetOrCompute(bounded(t, 30*time.Second), key, fnB)
			return valErr[string]{v, err}
		})
		// Not synchronisation: the offset varies where in B's sequence the
		// fill lands (0 to 96 ms: B's read, lease attempt and SUBSCRIBE over
		// the slow link, 30 ms each way).
		offset := time.NewTimer(time.Duration(i) * 4 * time.Millisecond)
		<-offset.C
		h.Release()
		if err := within(t, leader, 5*time.Second, "A's fill").v; err != nil {
			t.Fatalf("round %d: A: %v", i, err)
		}
		filled := time.Now()
		r, ok := tryWithin(waiter, 1500*time.Millisecond)
		if !ok {
			t.Fatalf("round %d (fill %s after B started): B did not answer within 1.5s of the fill: it missed the notification (PollInterval 1m)", i, time.Duration(i)*4*time.Millisecond)
		}
		if r.v.err != nil || r.v.v != "from-a" {
			t.Fatalf("round %d: B got %q, %v; want A's value", i, r.v.v, r.v.err)
		}
		t.Logf("round %d: B answered %s after the fill", i, time.Since(filled).Round(time.Millisecond))
	}
	if n := computedByB.Load(); n != 0 {
		t.Fatalf("B computed %d times; A filled every key", n)
	}
}
