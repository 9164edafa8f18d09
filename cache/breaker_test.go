package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The circuit breaker (internal/redisstep): it never stays open once Redis
// answers, every call consults it, and it closes again after a silent Redis
// recovers.

// Issue 14, defect 1: a GetOrComputeMany (or any call) whose context is
// already cancelled must not be able to leave the breaker stuck open. The
// breaker is opened by a partition; the partition heals; then, as the
// cooldown ends, only cancelled batch calls hammer the cache, so that one of
// them is the first caller after the cooldown, trying to take the half-open
// probe and drop it. (A cancelled Fetch would not do: its hit-path GET runs
// detached from the cancellation on today's main, and closes the breaker.) Once Redis
// answers, calls must stop being Degraded within about BreakerCooldown (2 s
// is 40 cooldowns here).
func TestBreakerProbeNeverStuckOpen(t *testing.T) {
	p, rdb := proxiedClient(t, 300*time.Millisecond)
	const cooldown = 50 * time.Millisecond
	c := newCache[string](t, rdb, cache.Options{BreakerThreshold: 2, BreakerCooldown: cooldown, TTL: time.Hour})
	fn := func(context.Context) (string, error) { return "v", nil }

	p.SetPartition(true)
	for i := 0; !c.Stats().BreakerOpen; i++ {
		if i == 20 {
			t.Fatalf("20 calls against a partitioned Redis did not open the breaker: %+v", c.Stats())
		}
		if _, err := c.GetOrCompute(bounded(t, 5*time.Second), fmt.Sprint("open", i), fn); err != nil {
			t.Fatalf("a degraded call failed: %v", err)
		}
	}
	opened := time.Now()
	p.SetPartition(false)
	p.Reset() // connections that lost bytes in the partition are dead anyway

	// Hammer with cancelled calls across the end of the cooldown, so that
	// one of them is the first caller after it.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				keys := []string{fmt.Sprint("b", g, "-", i), "shared"}
				_, _ = c.GetOrComputeMany(cancelled, keys, func(context.Context, []string) (map[string]string, error) {
					return nil, errors.New("a cancelled batch must not compute")
				})
			}
		})
	}
	clockPast(t, opened, 3*cooldown)
	close(stop)
	waitGroupWithin(t, &wg, 10*time.Second, "the cancelled callers stopping")

	// Redis is healthy: within about the cooldown, calls are answered by
	// Redis again (a miss, then hits), not Degraded.
	var last cache.Result[string]
	var lastErr error
	eventually(t, 2*time.Second, func() bool {
		last, lastErr = c.Fetch(bounded(t, 5*time.Second), "after", fn)
		return lastErr == nil && last.Outcome != cache.Degraded
	}, func() string {
		return fmt.Sprintf("breaker stuck open: 40 cooldowns after Redis healed, calls are still %v (err %v); stats %+v", last.Outcome, lastErr, c.Stats())
	})
	for i := range 20 {
		r, err := c.Fetch(bounded(t, 5*time.Second), "after", fn)
		if err != nil || r.Outcome != cache.Hit {
			t.Fatalf("call %d after the breaker closed: outcome %v, err %v (want a Redis hit)", i, r.Outcome, err)
		}
	}
	if c.Stats().BreakerOpen {
		t.Fatalf("breaker still reported open: %+v", c.Stats())
	}
}

// Issue 14, defect 8: Get (and Set, Delete) consult the breaker. While it
// is open (Redis black-holed), each returns an error matching
// ErrUnavailable at once, without paying the client's 1.5 s read timeout.
func TestGetSetDeleteConsultTheBreaker(t *testing.T) {
	t.Parallel()
	const readTimeout = 1500 * time.Millisecond
	p, rdb := proxiedClient(t, readTimeout)
	c := newCache[string](t, rdb, cache.Options{BreakerThreshold: 2, BreakerCooldown: time.Minute})
	if err := c.Set(bounded(t, 5*time.Second), "k", "v"); err != nil {
		t.Fatal(err)
	}
	p.SetPartition(true)
	// Open the breaker with two failing calls, one after the other:
	// silence verdicts closer together than half a budget count once (a
	// fleet's cold start is not two outages), so concurrent calls would
	// count as one.
	for i := range 2 {
		_, _ = c.GetOrCompute(bounded(t, 10*time.Second), fmt.Sprint("open", i), func(context.Context) (string, error) { return "x", nil })
	}
	if !c.Stats().BreakerOpen {
		t.Fatalf("two read timeouts with BreakerThreshold 2 did not open the breaker: %+v", c.Stats())
	}
	calls := []struct {
		name string
		call func(context.Context) error
	}{
		{"Get", func(ctx context.Context) error {
			v, found, err := c.Get(ctx, "k")
			if found {
				return fmt.Errorf("found %q with Redis unreachable", v)
			}
			return err
		}},
		{"Set", func(ctx context.Context) error { return c.Set(ctx, "k", "v2") }},
		{"Delete", func(ctx context.Context) error { return c.Delete(ctx, "k") }},
	}
	for _, tc := range calls {
		for i := range 3 {
			start := time.Now()
			err := tc.call(bounded(t, 10*time.Second))
			took := time.Since(start)
			if !errors.Is(err, cache.ErrUnavailable) || took >= readTimeout/2 {
				// One failure per call says it; more would only add read timeouts.
				t.Errorf("%s #%d with the breaker open: err %v (want ErrUnavailable), took %s (a Redis timeout is %s)", tc.name, i, err, took, readTimeout)
				break
			}
		}
	}
}

// The breaker opens on timed-out steps and closes again once Redis answers.
func TestBreakerClosesAfterSilentRedisRecovers(t *testing.T) {
	for _, cfg := range clientConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			p := newProxy(t)
			var opened, closedEv atomic.Int64
			c := budgeted(t, cfg.opts(p.Addr()), cache.Options{Namespace: redistest.Prefix(t), BreakerThreshold: 2,
				BreakerCooldown: 20 * time.Millisecond,
				Observer: cache.ObserverFunc(func(_ context.Context, e cache.Event) {
					switch e.Kind {
					case cache.EventBreakerOpen:
						opened.Add(1)
					case cache.EventBreakerClosed:
						closedEv.Add(1)
					}
				})})
			ctx := context.Background()
			fn := func(context.Context) (string, error) { return "v", nil }
			p.SetPartition(true)
			for i := range 4 {
				if r, err := c.Fetch(ctx, "d"+strconv.Itoa(i), fn); err != nil || r.Outcome != cache.Degraded {
					t.Fatalf("call %d while silent: %+v %v", i, r, err)
				}
			}
			if opened.Load() == 0 {
				t.Fatal("the breaker did not open after timed-out steps")
			}
			p.SetPartition(false)
			p.Reset() // the stuck connections carry late replies: drop them
			i := 0
			eventually(t, 10*time.Second, func() bool {
				i++
				r, err := c.Fetch(ctx, "r"+strconv.Itoa(i), fn)
				return err == nil && r.Outcome == cache.Miss
			}, func() string { return fmt.Sprintf("stats %+v, closed events %d", c.Stats(), closedEv.Load()) })
		})
	}
}
