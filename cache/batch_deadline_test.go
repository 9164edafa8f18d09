package cache_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A GetOrComputeMany ends by its caller's deadline, computes nothing once
// cancelled, and leaves no claim behind: when fn panics or exits, when the
// deadline passes mid-batch, and while another replica holds a key.

// Pins (guarantee 5): a batch fn that panics, calls runtime.Goexit, or
// leaves keys out of its result releases every claim at once: another
// replica computes those keys immediately (LeaseTTL is 30s here, so a
// wedged claim would hold it until its WaitTimeout).
func TestBatchClaimsReleasedOnPanicAndGoexit(t *testing.T) {
	cases := map[string]func(context.Context, []string) (map[string]string, error){
		"panic":   func(context.Context, []string) (map[string]string, error) { panic("boom") },
		"goexit":  func(context.Context, []string) (map[string]string, error) { runtime.Goexit(); return nil, nil },
		"missing": func(context.Context, []string) (map[string]string, error) { return map[string]string{"x": "vx"}, nil },
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			caches := replicas[string](t, 2, cache.Options{LeaseTTL: 30 * time.Second, WaitTimeout: 20 * time.Second})
			m, err := caches[0].GetOrComputeMany(bounded(t, 10*time.Second), []string{"x", "y", "z"}, bad)
			if err == nil {
				t.Fatalf("bad batch fn: %v, no error", m)
			}
			var calls atomic.Int32
			for _, k := range []string{"y", "z"} {
				start := time.Now()
				v, err := caches[1].GetOrCompute(bounded(t, 10*time.Second), k, func(context.Context) (string, error) {
					calls.Add(1)
					return "w" + k, nil
				})
				if err != nil || v != "w"+k || time.Since(start) > time.Second {
					t.Errorf("%s on the other replica: %q %v after %s (claim not released?)", k, v, err, time.Since(start))
				}
			}
			if name != "missing" {
				start := time.Now()
				v, err := caches[1].GetOrCompute(bounded(t, 10*time.Second), "x", func(context.Context) (string, error) { return "wx", nil })
				if err != nil || v != "wx" || time.Since(start) > time.Second {
					t.Errorf("x on the other replica: %q %v after %s", v, err, time.Since(start))
				}
			}
		})
	}
}

// Pins (guarantee 4): a batch caller's deadline is honoured while another
// replica holds the claim and fn ignores its context.
func TestBatchDeadlineWhileAnotherReplicaHolds(t *testing.T) {
	caches := replicas[string](t, 2, cache.Options{})
	h := newHeld(t, "v")
	go func() { _, _ = caches[0].GetOrCompute(bounded(t, 20*time.Second), "k", h.fn) }()
	within(t, h.calls, 5*time.Second, "the holder computing")
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := caches[1].GetOrComputeMany(ctx, []string{"k", "j"}, h.batch("b"))
	if took := time.Since(start); took > 400*time.Millisecond {
		t.Fatalf("batch with an 80ms deadline returned after %s (%v)", took, err)
	}
	h.Release()
}

// Issue 14, defect 4 (deadline): GetOrComputeMany returns by the caller's
// deadline with the context's error for the keys without a value, against
// a slow fn (blocked until the test releases it) and against +100 ms and
// +1.5 s of Redis latency (each way); the computes it started go on
// detached and fill the keys.
func TestBatchHonoursDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		latency time.Duration
	}{{"slow fn", 0}, {"slow fn and +100ms Redis latency", 100 * time.Millisecond}, {"slow fn and +1.5s Redis latency", 1500 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			p, rdb := proxiedClient(t, 5*time.Second)
			ns := redistest.Prefix(t)
			c := newCache[string](t, rdb, cache.Options{Namespace: ns, TTL: time.Hour, BreakerThreshold: 100})
			if err := c.Set(bounded(t, 10*time.Second), "cached", "v:cached"); err != nil {
				t.Fatal(err)
			}
			p.SetLatency(tc.latency)
			h := newHeld(t, "")
			keys := []string{"a", "b", "c"}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			type res struct {
				m   map[string]string
				err error
			}
			ch := async(func() res {
				m, err := c.GetOrComputeMany(ctx, keys, h.batch("v:"))
				return res{m, err}
			})
			r, ok := tryWithin(ch, time.Second)
			h.Release()
			if !ok {
				p.SetLatency(0)
				p.Reset()
				r = within(t, ch, 10*time.Second, "GetOrComputeMany returning after fn was released and the link healed")
				t.Fatalf("GetOrComputeMany with a 50ms deadline returned after %s (bound 1s): %v, %v", r.took, r.v.m, r.v.err)
			}
			var ke cache.KeyErrors
			if !errors.As(r.v.err, &ke) {
				t.Fatalf("after the deadline: %v, %v; want KeyErrors", r.v.m, r.v.err)
			}
			for _, k := range keys {
				if _, got := r.v.m[k]; got {
					continue
				}
				if !errors.Is(ke[k], context.DeadlineExceeded) {
					t.Errorf("key %q without a value: error %v, want context.DeadlineExceeded", k, ke[k])
				}
			}
			p.SetLatency(0)
			if tc.latency > 0 {
				return // the deadline may have passed before any lease was taken
			}
			// The compute went on detached: the keys fill without another fn call.
			eventually(t, 5*time.Second, func() bool {
				n := 0
				for _, k := range keys {
					if v, found, _ := c.Get(bounded(t, 5*time.Second), k); found && v == "v:"+k {
						n++
					}
				}
				return n == len(keys)
			}, func() string { return "the detached batch compute never filled its keys" })
			if n := len(h.calls); n != 1 {
				t.Fatalf("fn ran %d times, want 1", n)
			}
		})
	}
}

// Issue 14, defect 4 (cancelled call): a GetOrComputeMany whose context is
// already cancelled computes nothing locally; every key gets the context's
// error; no key is Degraded.
func TestBatchCancelledComputesNothing(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{TTL: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var calls atomic.Int32
	keys := []string{"a", "b", "c", "d"}
	got, err := c.GetOrComputeMany(ctx, keys, func(ctx context.Context, ks []string) (map[string]string, error) {
		calls.Add(1)
		return valuesOf(ctx, ks)
	})
	if calls.Load() != 0 || len(got) != 0 {
		t.Fatalf("a cancelled batch ran fn %d times and returned %v", calls.Load(), got)
	}
	var ke cache.KeyErrors
	if !errors.As(err, &ke) || len(ke) != len(keys) {
		t.Fatalf("a cancelled batch: err %v, want KeyErrors for all %d keys", err, len(keys))
	}
	for _, k := range keys {
		if !errors.Is(ke[k], context.Canceled) {
			t.Errorf("key %q: %v, want context.Canceled", k, ke[k])
		}
	}
	if s := c.Stats(); s.Degraded != 0 || s.Computes != 0 || s.BreakerOpen {
		t.Fatalf("a cancelled batch: %+v", s)
	}
}

// Issue 14, defect 4 (orphaned leases): a batch whose deadline expires
// while its lease request is in transit (+40 ms of latency each way, the
// deadline swept across a whole batch's time) must not leave the leases it took
// orphaned: another replica asking for those keys (LeaseTTL and WaitTimeout
// a minute) gets a value within 3 s, because the taker computes detached
// and fills, or releases them.
func TestBatchNoOrphanedLeases(t *testing.T) {
	t.Parallel()
	p, _ := proxiedClient(t, 3*time.Second)
	// A client that honours context deadlines on the wire, so a deadline can
	// expire with the lease request in flight (Redis took the leases, the
	// client saw an error).
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, TTL: time.Hour, LeaseTTL: time.Minute, WaitTimeout: time.Minute, BreakerThreshold: 1000}
	a := newCache[string](t, rdb, opts)
	b := newCache[string](t, redistest.Client(t), opts)
	p.SetLatency(40 * time.Millisecond)
	// Warm the connection, then time a whole batch over the slow link; the
	// deadlines below sweep that time, so one of them expires with the
	// lease request in flight whatever the machine's speed.
	if _, err := a.GetOrComputeMany(bounded(t, 10*time.Second), []string{"warm-1"}, valuesOf); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := a.GetOrComputeMany(bounded(t, 10*time.Second), []string{"warm-2a", "warm-2b"}, valuesOf); err != nil {
		t.Fatal(err)
	}
	full := time.Since(start)
	var all []string
	for i := range 20 {
		d := full * time.Duration(20+5*i) / 100
		keys := []string{fmt.Sprint("k", i, "a"), fmt.Sprint("k", i, "b")}
		all = append(all, keys...)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		ch := async(func() error { _, err := a.GetOrComputeMany(ctx, keys, valuesOf); return err })
		within(t, ch, 10*time.Second, fmt.Sprintf("the batch with a %s deadline returning", d))
		cancel()
	}
	p.SetLatency(0)
	var wg sync.WaitGroup
	errs := make(chan error, len(all))
	for _, k := range all {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			v, err := b.GetOrCompute(ctx, k, func(context.Context) (string, error) { return "v:" + k, nil })
			if err != nil || v != "v:"+k {
				errs <- fmt.Errorf("key %q: %q, %v (a lease orphaned by the expired batch?)", k, v, err)
			}
		})
	}
	waitGroupWithin(t, &wg, 10*time.Second, "replica B's calls returning (each has a 3s deadline)")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("replica B waited %d times, computed %d times", b.Stats().Waited, b.Stats().Computes)
}
