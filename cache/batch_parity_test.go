package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// GetOrComputeMany honours what GetOrCompute honours: StaleIfError, SetTTL
// and SetStale, RefreshEarly answered as a Hit, MaxDegradedComputes.

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
func TestBatchStaleIfError(t *testing.T) {
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
func TestBatchSetTTLAndSetStale(t *testing.T) {
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
func TestBatchRefreshEarlyIsHit(t *testing.T) {
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

// Issue 14, defect 4 (MaxDegradedComputes): with the breaker open, 8
// concurrent batches of a process with MaxDegradedComputes 1 run at most
// one fn at a time, and still all get their values (Degraded).
func TestBatchMaxDegradedComputes(t *testing.T) {
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
