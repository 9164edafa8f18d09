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
	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redistest"
)

// proxied returns n caches in one namespace whose clients reach the
// package's Redis through a fault-injecting proxy.
func proxied(t *testing.T, n int) (*faultproxy.Proxy, []*cache.Cache[string]) {
	t.Helper()
	return proxiedWith(t, n, cache.Options{})
}

// proxiedWith is proxied with opts for the caches (its namespace, breaker
// and wait options are set here; L1 is off unless opts sets L1Size: these
// tests are of the Redis path, which L1 would answer hits for).
func proxiedWith(t *testing.T, n int, opts cache.Options) (*faultproxy.Proxy, []*cache.Cache[string]) {
	t.Helper()
	p := newProxy(t)
	ns := redistest.Prefix(t)
	var caches []*cache.Cache[string]
	for range n {
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
			ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		opts.Namespace, opts.BreakerThreshold, opts.BreakerCooldown, opts.WaitTimeout = ns, 3, 20*time.Millisecond, 2*time.Second
		if opts.L1Size == 0 {
			opts.L1Size = -1
		}
		caches = append(caches, newCache[string](t, rdb, opts))
	}
	return p, caches
}

// storm runs perCache callers on each cache against key and reports wrong
// values and errors.
func storm(caches []*cache.Cache[string], perCache int, key string, fn func(context.Context) (string, error), want string) (wrong, failed int32) {
	var w, f atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range caches {
		for range perCache {
			wg.Go(func() {
				<-start
				v, err := c.GetOrCompute(context.Background(), key, fn)
				switch {
				case err != nil:
					f.Add(1)
				case v != want:
					w.Add(1)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	return w.Load(), f.Load()
}

func TestFaultAddedLatency(t *testing.T) {
	p, caches := proxied(t, 3)
	p.SetLatency(20 * time.Millisecond)
	o := &origin[string]{value: "v", delay: 50 * time.Millisecond}
	wrong, failed := storm(caches, 50, "k", o.fn, "v")
	if wrong != 0 || failed != 0 || o.calls.Load() != 1 {
		t.Fatalf("20ms added latency: wrong %d, errors %d, origin calls %d; stats %+v", wrong, failed, o.calls.Load(), caches[0].Stats())
	}
}

func TestFaultConnectionResets(t *testing.T) {
	p, caches := proxied(t, 3)
	o := &origin[string]{value: "v", started: make(chan struct{}, 1), delay: 100 * time.Millisecond}
	done := make(chan [2]int32)
	go func() { w, f := storm(caches, 50, "k", o.fn, "v"); done <- [2]int32{w, f} }()
	<-o.started
	p.Reset() // every connection, in the middle of the storm
	res := <-done
	if res[0] != 0 || res[1] != 0 {
		t.Fatalf("resets mid-storm: wrong %d, errors %d", res[0], res[1])
	}
	if n := o.calls.Load(); n > 4 {
		t.Fatalf("origin ran %d times: more than the leader plus one degraded compute per replica", n)
	}
	t.Logf("resets mid-storm: origin calls %d", o.calls.Load())
}

func TestFaultPartitionThenHeal(t *testing.T) {
	p, caches := proxied(t, 3)
	ctx := context.Background()
	fn := func(context.Context) (string, error) { return "v", nil }
	if _, err := caches[0].GetOrCompute(ctx, "k", fn); err != nil {
		t.Fatal(err)
	}
	p.SetPartition(true)
	start := time.Now()
	wrong, failed := storm(caches, 20, "k", fn, "v")
	took := time.Since(start)
	if wrong != 0 || failed != 0 {
		t.Fatalf("partition: wrong %d, errors %d", wrong, failed)
	}
	for _, c := range caches {
		if c.Stats().Degraded == 0 {
			t.Fatalf("partition answered without degrading: %+v", c.Stats())
		}
	}
	p.SetPartition(false)
	p.Reset() // connections that lost bytes in the partition are dead anyway
	for _, c := range caches {
		waitFor(t, "recovery after the partition", func() bool {
			r, err := c.Fetch(ctx, "k", fn)
			return err == nil && r.Outcome == cache.Hit
		})
	}
	t.Logf("partition: 60 callers answered (degraded) in %s", took.Round(time.Millisecond))
}

func TestFaultSlowClose(t *testing.T) {
	p, caches := proxied(t, 2)
	p.SetSlowClose(300 * time.Millisecond)
	o := &origin[string]{value: "v", delay: 20 * time.Millisecond}
	if wrong, failed := storm(caches, 30, "k", o.fn, "v"); wrong != 0 || failed != 0 || o.calls.Load() != 1 {
		t.Fatalf("slow close: wrong %d, errors %d, calls %d", wrong, failed, o.calls.Load())
	}
	p.Reset()
	if wrong, failed := storm(caches, 30, "k", o.fn, "v"); wrong != 0 || failed != 0 {
		t.Fatalf("after slow-closed connections: wrong %d, errors %d", wrong, failed)
	}
}

// A batch's fill pipeline fails (the proxy black-holes it) after the origin
// answered: the caller still gets every value, and each fill is retried in
// the background until Redis answers again, so the values are not lost to
// the fleet and the next lookup does not recompute them.
func TestFaultBatchFillRetried(t *testing.T) {
	p, caches := proxied(t, 1)
	c := caches[0]
	keys := []string{"a", "b", "c"}
	o := &batchOrigin{}
	started, release := make(chan struct{}), make(chan struct{})
	held := func(ctx context.Context, ks []string) (map[string]string, error) {
		close(started)
		<-release
		return o.fn(ctx, ks)
	}
	done := make(chan error, 1)
	go func() {
		got, err := c.GetOrComputeMany(context.Background(), keys, held)
		for _, k := range keys {
			if err == nil && got[k] != "v:"+k {
				err = fmt.Errorf("%s: %q", k, got[k])
			}
		}
		done <- err
	}()
	<-started
	p.SetPartition(true)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.SetPartition(false)
	waitFor(t, "the three fills retried", func() bool { return c.Stats().Refills == 3 })
	got, err := c.GetOrComputeMany(context.Background(), keys, o.fn)
	if err != nil || len(got) != 3 || len(o.calls) != 1 {
		t.Fatalf("after the heal: %v %v, origin called %d times; %+v", got, err, len(o.calls), c.Stats())
	}
}

// againWhileUnavailable calls op until it returns anything but an error
// matching cache.ErrUnavailable, at most five times, and fails the test
// otherwise. The fault tests' clients give up a read at 200 ms (that is how
// they tell a partition), so a step against a healthy Redis on a loaded
// machine, or on a connection the partition left hung, may fail; the docs
// say such an error means "call again", as a user's code does.
func againWhileUnavailable(t *testing.T, what string, op func() error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil {
			return
		}
		if !errors.Is(err, cache.ErrUnavailable) || attempt == 5 {
			t.Fatalf("%s, attempt %d: %v", what, attempt, err)
		}
	}
}

// fetchFromRedis fetches key on c, again while Redis does not answer the
// call (Outcome Degraded), at most five times, and returns the first answer
// Redis took part in.
func fetchFromRedis(t *testing.T, c *cache.Cache[string], key string, fn func(context.Context) (string, error)) cache.Result[string] {
	t.Helper()
	var r cache.Result[string]
	againWhileUnavailable(t, "Fetch("+key+") with Redis back", func() error {
		var err error
		r, err = c.Fetch(context.Background(), key, fn)
		if err == nil && r.Outcome == cache.Degraded {
			return fmt.Errorf("answered without Redis (%+v): %w", r, cache.ErrUnavailable)
		}
		return err
	})
	return r
}
