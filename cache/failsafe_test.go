package cache_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// 4 replicas x 50 callers on an expired key inside StaleIfError, the origin
// failing at once: one origin call per FailSafeThrottle across the whole
// fleet, and every caller answered with the stale value, no error.
func TestFailSafeThrottleAcrossFleet(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, StaleIfError: time.Hour, FailSafeThrottle: time.Minute}
	clk := writeStale(t, redistest.Client(t), ns, "k", "old", opts)
	caches := replicas[string](t, 4, opts)
	clocked(clk, caches...)
	var calls atomic.Int32
	failing := func(context.Context) (string, error) {
		calls.Add(1)
		return "", errors.New("origin down")
	}
	burst := func() {
		t.Helper()
		var wg sync.WaitGroup
		for _, c := range caches {
			for range 50 {
				wg.Go(func() {
					r, err := c.Fetch(bounded(t, 10*time.Second), "k", failing)
					if err != nil || r.Value != "old" || r.Outcome != cache.Stale {
						t.Errorf("%+v %v: want the stale value", r, err)
					}
				})
			}
		}
		wg.Wait()
	}
	oneCallPerThrottle(t, clk, time.Minute, &calls, burst)
}

// oneCallPerThrottle runs two bursts inside one fail-safe throttle and one
// after it, asserting one origin call for the first two together and one
// more for the third.
func oneCallPerThrottle(t *testing.T, clk *cache.Clock, throttle time.Duration, calls *atomic.Int32, burst func()) {
	t.Helper()
	burst()
	burst() // inside the throttle: nobody calls the origin
	if n := calls.Load(); n != 1 {
		t.Fatalf("origin called %d times in one throttle across the fleet, want 1", n)
	}
	clk.Advance(throttle + time.Millisecond)
	burst()
	if n := calls.Load(); n != 2 {
		t.Fatalf("origin called %d times after the throttle ended once, want 2", n)
	}
}

// The origin failing slowly: callers waiting on another replica's failing
// compute answer with the stale value as soon as it fails (the re-armed
// value's fill wakes them), not after polling or a failed round of their own.
func TestFailSafeWakesWaitersOnOtherReplicas(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, StaleIfError: time.Hour, PollInterval: time.Minute, WaitTimeout: time.Minute}
	clk := writeStale(t, redistest.Client(t), ns, "k", "old", opts)
	caches := replicas[string](t, 3, opts)
	clocked(clk, caches...)
	entered, fail := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	slow := func(context.Context) (string, error) {
		if calls.Add(1) == 1 {
			close(entered)
		}
		<-fail
		return "", errors.New("origin down")
	}
	leader := make(chan error, 1)
	go func() {
		_, err := caches[0].GetOrCompute(bounded(t, 30*time.Second), "k", slow)
		leader <- err
	}()
	within(t, entered, 5*time.Second, "the leader's compute starting")
	var wg sync.WaitGroup
	for _, c := range caches[1:] {
		for range 20 {
			wg.Go(func() {
				r, err := c.Fetch(bounded(t, 30*time.Second), "k", slow)
				if err != nil || r.Value != "old" || r.Outcome != cache.Stale {
					t.Errorf("waiter: %+v %v", r, err)
				}
			})
		}
	}
	addr := redistest.Addr(t)
	waitFor(t, "the other replicas waiting", func() bool {
		return redistest.PlainSubscribers(t, addr, channelOf(ns, "k")) >= 2
	})
	close(fail)
	waitGroupWithin(t, &wg, 5*time.Second, "the waiters answering once the leader failed")
	if err := <-leader; err != nil {
		t.Fatalf("leader: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("origin called %d times, want 1", n)
	}
}

// SoftTimeout: a compute that runs long while a stale-if-error value exists
// answers with that value (Result.Err matches ErrSoftTimeout) and fills in
// the background when it ends. Redis and process-local mode.
func TestSoftTimeout(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			c, _ := expiredEntry(t, mode, cache.Options{StaleIfError: time.Hour, SoftTimeout: 20 * time.Millisecond})
			release := make(chan struct{})
			r, err := c.Fetch(bounded(t, 10*time.Second), "k", func(context.Context) (string, error) {
				<-release
				return "new", nil
			})
			if err != nil || r.Value != "old" || r.Outcome != cache.Stale || !errors.Is(r.Err, cache.ErrSoftTimeout) {
				t.Fatalf("past SoftTimeout: %+v %v", r, err)
			}
			if st := c.Stats(); st.SoftTimeouts != 1 {
				t.Fatalf("stats %+v", st)
			}
			close(release)
			waitFor(t, "the background compute to fill", func() bool {
				v, found, err := c.Get(context.Background(), "k")
				return err == nil && found && v == "new"
			})
		})
	}
}
