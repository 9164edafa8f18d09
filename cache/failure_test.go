package cache_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

const doFrame = "singleflight.(*Group[...]).Do("

// A replica took the lease and died without filling or releasing: the others
// wait, take over when the lease expires, and compute once.
func TestHolderDiesOthersTakeOver(t *testing.T) {
	ns := redistest.Prefix(t)
	rdb := redistest.Client(t)
	dead, err := lease.New(rdb, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Acquire(context.Background(), ns+":k", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	caches := replicas[string](t, 2, cache.Options{Namespace: ns, WaitTimeout: 10 * time.Second})
	o := &origin[string]{value: "v"}
	var wg sync.WaitGroup
	results := make([]cache.Result[string], 2)
	for i, c := range caches {
		wg.Go(func() {
			var err error
			results[i], err = c.Fetch(context.Background(), "k", o.fn)
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("origin ran %d times after the holder died, want 1", n)
	}
	got := map[cache.Outcome]int{results[0].Outcome: 1}
	got[results[1].Outcome]++
	if got[cache.Miss] != 1 || got[cache.Waited]+got[cache.Hit] != 1 {
		t.Fatalf("outcomes %v, want one Miss and one Waited/Hit", got)
	}
}

// Work longer than the lease TTL: the lease is extended, so the other
// replica keeps waiting instead of computing a second time.
func TestComputeLongerThanLeaseTTLIsExtended(t *testing.T) {
	opts := cache.Options{LeaseTTL: 150 * time.Millisecond, WaitTimeout: 10 * time.Second}
	caches := replicas[int](t, 2, opts)
	slow := &origin[int]{value: 1, started: make(chan struct{}, 1), delay: 600 * time.Millisecond}
	other := &origin[int]{value: 2}
	done := make(chan cache.Result[int])
	go func() {
		r, err := caches[0].Fetch(context.Background(), "k", slow.fn)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	<-slow.started
	r2, err := caches[1].Fetch(context.Background(), "k", other.fn)
	if err != nil {
		t.Fatal(err)
	}
	r1 := <-done
	// The second replica waits past several lease TTLs and answers with
	// the first one's value: Waited, or Hit when the machine stalled its
	// call until after the fill (it then read the value; it still did not
	// compute, which is what this pins).
	if other.calls.Load() != 0 || r1.Outcome != cache.Miss || (r2.Outcome != cache.Waited && r2.Outcome != cache.Hit) || r2.Value != 1 {
		t.Fatalf("second replica computed (%d calls) or did not wait: %+v %+v", other.calls.Load(), r1, r2)
	}
}

// A replica paused mid-compute loses its lease to another, which fills; when
// the paused one resumes, its late fill is rejected by the fence.
func TestPausedHolderLateFillIsFencedOut(t *testing.T) {
	ns := redistest.Prefix(t)
	rdb := redistest.Client(t)
	caches := replicas[string](t, 2, cache.Options{Namespace: ns, WaitTimeout: 10 * time.Second})
	paused := &origin[string]{value: "old", started: make(chan struct{}, 1), release: make(chan struct{})}
	done := make(chan cache.Result[string])
	go func() {
		r, err := caches[0].Fetch(context.Background(), "k", paused.fn)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	<-paused.started
	// The pause outlasts the lease: it expires (we delete it, as expiry would).
	leaseKey, _ := lease.Keys(ns + ":k")
	if err := rdb.Del(context.Background(), leaseKey).Err(); err != nil {
		t.Fatal(err)
	}
	fresh := &origin[string]{value: "new"}
	r, err := caches[1].Fetch(context.Background(), "k", fresh.fn)
	if err != nil || r.Value != "new" || r.Outcome != cache.Miss {
		t.Fatalf("takeover: %+v %v", r, err)
	}
	close(paused.release)
	old := <-done
	if old.Value != "old" {
		t.Fatalf("the paused caller should still get its own result, got %+v", old)
	}
	if got := caches[0].Stats().FencedOut; got != 1 {
		t.Fatalf("FencedOut=%d, want 1", got)
	}
	v, found, err := caches[1].Get(context.Background(), "k")
	if err != nil || !found || v != "new" {
		t.Fatalf("stored value %q found=%v err=%v: the late fill overwrote the newer value", v, found, err)
	}
}

// Delete while a compute is in flight wins: the late fill is rejected.
// Set wins the same way.
func TestDeleteAndSetWinOverInflightCompute(t *testing.T) {
	for _, mode := range []string{"delete", "set"} {
		t.Run(mode, func(t *testing.T) {
			c := newCache[string](t, redistest.Client(t), cache.Options{})
			o := &origin[string]{value: "computed", started: make(chan struct{}, 1), release: make(chan struct{})}
			done := make(chan error)
			go func() {
				_, err := c.GetOrCompute(context.Background(), "k", o.fn)
				done <- err
			}()
			<-o.started
			var err error
			if mode == "delete" {
				err = c.Delete(context.Background(), "k")
			} else {
				err = c.Set(context.Background(), "k", "set-by-admin")
			}
			if err != nil {
				t.Fatal(err)
			}
			close(o.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := c.Stats().FencedOut; got != 1 {
				t.Fatalf("FencedOut=%d, want 1", got)
			}
			v, found, err := c.Get(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			switch mode {
			case "delete":
				if found {
					t.Fatalf("deleted key came back as %q", v)
				}
			case "set":
				if v != "set-by-admin" {
					t.Fatalf("Set value overwritten by %q", v)
				}
			}
		})
	}
}

// Redis unreachable: callers compute locally, coalesced, Outcome Degraded;
// the breaker opens; once Redis is back, calls use it again.
func TestRedisDownDegradedAndRecovers(t *testing.T) {
	srv, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		redistest.Server(t) // skips, or fails under CI
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newCache[int](t, rdb, cache.Options{BreakerThreshold: 2, BreakerCooldown: 20 * time.Millisecond})
	o := &origin[int]{value: 7}
	ctx := context.Background()
	if r, err := c.Fetch(ctx, "k", o.fn); err != nil || r.Outcome != cache.Miss {
		t.Fatalf("before the outage: %+v %v", r, err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		r, err := c.Fetch(ctx, "k", o.fn)
		if err != nil || r.Value != 7 || r.Outcome != cache.Degraded {
			t.Fatalf("outage call %d: %+v %v", i, r, err)
		}
	}
	st := c.Stats()
	if !st.BreakerOpen || st.RedisErrors == 0 || st.Degraded != 5 {
		t.Fatalf("stats during the outage: %+v", st)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Recovery is automatic: after the cooldown one call probes, and then
	// calls use Redis again (the restarted server lost the value: Miss).
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := c.Fetch(ctx, "k", o.fn)
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome != cache.Degraded {
			if r.Outcome != cache.Miss {
				t.Fatalf("after recovery: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cache never recovered")
		}
		time.Sleep(5 * time.Millisecond) // waiting out the breaker's cooldown
	}
	if r, err := c.Fetch(ctx, "k", o.fn); err != nil || r.Outcome != cache.Hit {
		t.Fatalf("after recovery: %+v %v", r, err)
	}
	if c.Stats().BreakerOpen {
		t.Fatal("breaker still open after recovery")
	}
}

func TestRedisNeverThereDegradedCoalesced(t *testing.T) {
	c := newCache[int](t, downClient(t), cache.Options{})
	o := &origin[int]{value: 3, release: make(chan struct{})}
	var wg sync.WaitGroup
	const n = 50
	for range n {
		wg.Go(func() {
			r, err := c.Fetch(context.Background(), "k", o.fn)
			if err != nil || r.Value != 3 || r.Outcome != cache.Degraded {
				t.Errorf("%+v %v", r, err)
			}
		})
	}
	leakcheck.WaitBlocked(t, doFrame, n, 10*time.Second)
	close(o.release)
	wg.Wait()
	if calls := o.calls.Load(); calls != 1 {
		t.Fatalf("degraded computes were not coalesced: %d calls", calls)
	}
}

func TestDegradedComputesCapped(t *testing.T) {
	c := newCache[int](t, downClient(t), cache.Options{MaxDegradedComputes: 1})
	var mu sync.Mutex
	running, peak := 0, 0
	fn := func(context.Context) (int, error) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the origin's latency
		mu.Lock()
		running--
		mu.Unlock()
		return 1, nil
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, err := c.GetOrCompute(context.Background(), string(rune('a'+i)), fn); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if peak != 1 {
		t.Fatalf("peak concurrent degraded computes %d, want 1", peak)
	}
}

// Another replica holds the lease past WaitTimeout: each policy.
func TestContentionPolicies(t *testing.T) {
	hold := func(t *testing.T, ns string) {
		l, err := lease.New(redistest.Client(t), lease.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Acquire(context.Background(), ns+":k", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("compute anyway", func(t *testing.T) {
		ns := redistest.Prefix(t)
		hold(t, ns)
		c := newCache[int](t, redistest.Client(t), cache.Options{Namespace: ns, WaitTimeout: 30 * time.Millisecond})
		o := &origin[int]{value: 5}
		r, err := c.Fetch(context.Background(), "k", o.fn)
		if err != nil || r.Value != 5 || r.Outcome != cache.Miss || o.calls.Load() != 1 {
			t.Fatalf("%+v %v calls=%d", r, err, o.calls.Load())
		}
		if _, found, _ := c.Get(context.Background(), "k"); found {
			t.Fatal("a value computed without the lease was stored")
		}
	})
	t.Run("error", func(t *testing.T) {
		ns := redistest.Prefix(t)
		hold(t, ns)
		c := newCache[int](t, redistest.Client(t), cache.Options{Namespace: ns, WaitTimeout: 30 * time.Millisecond, OnBusy: cache.BusyError})
		o := &origin[int]{value: 5}
		_, err := c.Fetch(context.Background(), "k", o.fn)
		if !errors.Is(err, cache.ErrLeaseBusy) || o.calls.Load() != 0 {
			t.Fatalf("err=%v calls=%d", err, o.calls.Load())
		}
	})
	t.Run("fallback", func(t *testing.T) {
		ns := redistest.Prefix(t)
		hold(t, ns)
		c := newCache[int](t, redistest.Client(t), cache.Options{Namespace: ns, WaitTimeout: 30 * time.Millisecond})
		o := &origin[int]{value: 5}
		r, err := c.FetchWithFallback(context.Background(), "k", o.fn, func(context.Context) (int, error) { return -1, nil })
		if err != nil || r.Value != -1 || r.Outcome != cache.Fallback || o.calls.Load() != 0 {
			t.Fatalf("%+v %v calls=%d", r, err, o.calls.Load())
		}
	})
}
