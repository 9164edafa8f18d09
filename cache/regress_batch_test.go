package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// valuesOf is a batch fn giving every key "v:"+key.
func valuesOf(_ context.Context, keys []string) (map[string]string, error) {
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		m[k] = "v:" + k
	}
	return m, nil
}

// Issue 14, defect 4 (stale-if-error): an expired entry inside StaleIfError
// is returned by GetOrComputeMany when fn fails, as GetOrCompute does; the
// key has no KeyErrors entry; a key with no previous value gets the error.
func TestRegressBatchStaleIfError(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, TTL: time.Hour, StaleIfError: time.Hour}
	rdb := redistest.Client(t)
	clk := writeStale(t, rdb, ns, "a", "old-a", opts)
	writeStaleAt(t, clk, rdb, ns, "b", "old-b", opts)
	c := clocked(clk, newCache[string](t, rdb, opts))
	boom := errors.New("origin down")
	var calls atomic.Int32
	got, err := c.GetOrComputeMany(bounded(t, 10*time.Second), []string{"a", "b", "new"}, func(context.Context, []string) (map[string]string, error) {
		calls.Add(1)
		return nil, boom
	})
	if got["a"] != "old-a" || got["b"] != "old-b" {
		t.Fatalf("batch with a failing fn inside StaleIfError: got %v (err %v), want the stale values", got, err)
	}
	var ke cache.KeyErrors
	if !errors.As(err, &ke) || len(ke) != 1 || !errors.Is(ke["new"], boom) {
		t.Fatalf("KeyErrors %v: want only \"new\" with the origin's error", err)
	}
	if calls.Load() == 0 {
		t.Fatal("fn was not called")
	}
	if n := c.Stats().StaleOnError; n != 2 {
		t.Fatalf("StaleOnError %d, want 2", n)
	}
	// GetOrCompute, for comparison, on a third stale key.
	writeStaleAt(t, clk, rdb, ns, "c", "old-c", opts)
	if v, err := c.GetOrCompute(bounded(t, 10*time.Second), "c", func(context.Context) (string, error) { return "", boom }); err != nil || v != "old-c" {
		t.Fatalf("GetOrCompute reference: %q, %v", v, err)
	}
}

// Issue 14, defect 4 (SetTTL/SetStale): overrides made inside a batch fn
// apply to every key of that call, exactly as inside a GetOrCompute fn. The
// windows are compared by the Redis expiry of the value keys (TTL + stale
// window): 1 h by the options, 30 s by the overrides.
func TestRegressBatchSetTTLAndSetStale(t *testing.T) {
	rdb := redistest.Client(t)
	c := newCache[string](t, rdb, cache.Options{TTL: time.Hour})
	ctx := bounded(t, 10*time.Second)
	var okTTL, okStale atomic.Bool
	override := func(ctx context.Context) {
		okTTL.Store(cache.SetTTL(ctx, 10*time.Second))
		okStale.Store(cache.SetStale(ctx, 20*time.Second, -1))
	}
	if _, err := c.GetOrCompute(ctx, "single", func(ctx context.Context) (string, error) {
		override(ctx)
		return "v", nil
	}); err != nil {
		t.Fatal(err)
	}
	if !okTTL.Load() || !okStale.Load() {
		t.Fatal("SetTTL/SetStale refused inside a GetOrCompute fn")
	}
	okTTL.Store(false)
	okStale.Store(false)
	keys := []string{"a", "b", "c", "d"}
	if _, err := c.GetOrComputeMany(ctx, keys, func(ctx context.Context, ks []string) (map[string]string, error) {
		override(ctx)
		return valuesOf(ctx, ks)
	}); err != nil {
		t.Fatal(err)
	}
	if !okTTL.Load() || !okStale.Load() {
		t.Fatalf("SetTTL/SetStale inside a batch fn reported false (ttl %v, stale %v)", okTTL.Load(), okStale.Load())
	}
	ref := rdb.PTTL(ctx, valueKeyOf(c.Namespace(), "single")).Val()
	if ref <= 20*time.Second || ref > 10*time.Minute {
		t.Fatalf("reference: GetOrCompute's entry expires in %s, want about 30s (TTL 10s + stale 20s), far below the options' hour", ref)
	}
	for _, k := range keys {
		d := rdb.PTTL(ctx, valueKeyOf(c.Namespace(), k)).Val()
		if d < ref-5*time.Second || d > ref+5*time.Second {
			t.Errorf("batch key %q expires in %s; GetOrCompute's with the same overrides in %s: the overrides were ignored", k, d, ref)
		}
	}
}

// Issue 14, defect 4 (RefreshEarly): an XFetch early refresh answer is a
// Hit, in a batch as in GetOrCompute, never Stale. Beta is huge so every
// read of a fresh entry with a compute time refreshes early.
func TestRegressBatchRefreshEarlyIsHit(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{TTL: time.Hour, Beta: 1e9})
	ctx := bounded(t, 10*time.Second)
	keys := []string{"a", "b", "c"}
	slow := func(ctx context.Context, ks []string) (map[string]string, error) {
		select { // the origin's own latency: XFetch needs a compute time
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return valuesOf(ctx, ks)
	}
	if _, err := c.GetOrComputeMany(ctx, keys, slow); err != nil {
		t.Fatal(err)
	}
	before := c.Stats()
	got, err := c.GetOrComputeMany(ctx, keys, slow)
	if err != nil || len(got) != 3 {
		t.Fatalf("second batch: %v, %v", got, err)
	}
	after := c.Stats()
	if d := after.Stale - before.Stale; d != 0 {
		t.Errorf("early refresh counted %d Stale (want 0)", d)
	}
	if d := after.Hits - before.Hits; d != 3 {
		t.Errorf("early refresh counted %d Hits, want 3", d)
	}
	// Let the background refreshes end before the cache closes.
	eventually(t, 5*time.Second, func() bool { return c.Stats().Refreshes >= 1 }, func() string {
		return fmt.Sprintf("no early refresh ran: %+v", c.Stats())
	})
}

// Issue 14, defect 4 (deadline): GetOrComputeMany returns by the caller's
// deadline with the context's error for the keys without a value, against
// a slow fn (blocked until the test releases it) and against +100 ms and
// +1.5 s of Redis latency (each way); the computes it started go on
// detached and fill the keys.
func TestRegressBatchHonoursDeadline(t *testing.T) {
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
func TestRegressBatchCancelledComputesNothing(t *testing.T) {
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
func TestRegressBatchNoOrphanedLeases(t *testing.T) {
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

// Issue 14, defect 4 (MaxDegradedComputes): with the breaker open, 8
// concurrent batches of a process with MaxDegradedComputes 1 run at most
// one fn at a time, and still all get their values (Degraded).
func TestRegressBatchMaxDegradedComputes(t *testing.T) {
	c := newCache[string](t, downClient(t), cache.Options{TTL: time.Hour, BreakerThreshold: 1, BreakerCooldown: time.Minute, MaxDegradedComputes: 1})
	ctx := bounded(t, 30*time.Second)
	for i := 0; !c.Stats().BreakerOpen; i++ {
		if i == 10 {
			t.Fatalf("the breaker did not open against a down Redis: %+v", c.Stats())
		}
		_, _ = c.GetOrCompute(ctx, "open", func(context.Context) (string, error) { return "x", nil })
	}
	var inflight, peak atomic.Int32
	fn := func(ctx context.Context, ks []string) (map[string]string, error) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		select { // the origin's own latency, so that batches overlap
		case <-time.After(30 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return valuesOf(ctx, ks)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			<-start
			keys := []string{fmt.Sprint("k", g, "a"), fmt.Sprint("k", g, "b")}
			got, err := c.GetOrComputeMany(ctx, keys, fn)
			if err != nil || len(got) != 2 {
				errs <- fmt.Errorf("batch %d: %v, %v", g, got, err)
			}
		})
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	within(t, done, 20*time.Second, "8 degraded batches returning")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p := peak.Load(); p > 1 {
		t.Fatalf("%d batch fns ran at once with MaxDegradedComputes 1", p)
	}
	if d := c.Stats().Degraded; d < 16 {
		t.Fatalf("Degraded %d, want 16 (8 batches x 2 keys)", d)
	}
}
