package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A caller's deadline, and ComputeTimeout, bound every call: on the hit path,
// when Redis goes silent after the claim, and for callers sharing a compute
// that ignores its context (single and batch, Redis and process-local).

// Issue 14, defect 5: the hit path honours the caller's deadline. A key is
// cached; then Redis gets +100 ms of latency, or is black-holed; a call
// with a 50 ms deadline must return within 1 s (the client's read timeout
// is 3 s) with an error matching context.DeadlineExceeded: no answer can
// arrive in time. Also when the call joins a GET another caller (with a
// long deadline) started: the joined GET must not hold it.
func TestHitPathHonoursDeadline(t *testing.T) {
	calls := map[string]func(c *cache.Cache[string], ctx context.Context) error{
		"Get": func(c *cache.Cache[string], ctx context.Context) error {
			v, found, err := c.Get(ctx, "k")
			if found {
				return fmt.Errorf("found %q", v)
			}
			return err
		},
		"GetOrCompute": func(c *cache.Cache[string], ctx context.Context) error {
			_, err := c.GetOrCompute(ctx, "k", func(context.Context) (string, error) { return "computed", nil })
			return err
		},
		"Fetch": func(c *cache.Cache[string], ctx context.Context) error {
			r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { return "computed", nil })
			if err == nil {
				return fmt.Errorf("answered %q (%v) past the deadline", r.Value, r.Outcome)
			}
			return err
		},
	}
	for _, fault := range []string{"+100ms latency", "black-holed"} {
		for _, joined := range []bool{false, true} {
			for name, call := range calls {
				t.Run(fmt.Sprintf("%s/%s/joined=%v", fault, name, joined), func(t *testing.T) {
					p, rdb := proxiedClient(t, 3*time.Second)
					c := newCache[string](t, rdb, cache.Options{TTL: time.Hour, BreakerThreshold: 100})
					if err := c.Set(bounded(t, 5*time.Second), "k", "cached"); err != nil {
						t.Fatal(err)
					}
					if fault == "black-holed" {
						p.SetPartition(true)
					} else {
						p.SetLatency(100 * time.Millisecond)
					}
					var first <-chan timed[error]
					if joined { // a caller with a long deadline starts the GET
						first = async(func() error {
							_, err := c.GetOrCompute(bounded(t, 10*time.Second), "k", func(context.Context) (string, error) { return "computed", nil })
							return err
						})
					}
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					defer cancel()
					ch := async(func() error { return call(c, ctx) })
					r, ok := tryWithin(ch, time.Second)
					p.SetPartition(false)
					p.SetLatency(0)
					p.Reset()
					if first != nil {
						within(t, first, 10*time.Second, "the first caller returning after the heal")
					}
					if !ok {
						r = within(t, ch, 10*time.Second, "the call returning after the heal")
						t.Fatalf("a call with a 50ms deadline returned after %s (bound 1s), err %v", r.took, r.v)
					}
					if !errors.Is(r.v, context.DeadlineExceeded) {
						t.Fatalf("after %s: err %v, want context.DeadlineExceeded", r.took, r.v)
					}
				})
			}
		}
	}
}

// Issue 14, defect 6: a compute that ignores its context is bounded by
// ComputeTimeout for its callers. 20 callers share a compute blocked until
// the test ends; each is released with an error matching
// context.DeadlineExceeded within 2 s (ComputeTimeout 100 ms); while that fn
// still runs, the key is not wedged: a later call computes again and gets
// its value; when the blocked fn finally returns, its result is discarded.
// In Redis mode and in process-local mode.
func TestComputeTimeoutReleasesCallers(t *testing.T) {
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) {
			ns := redistest.Prefix(t)
			// WaitTimeout 1s: whether the timed-out compute's lease is released at
			// once or left to lapse is not the contract's; the process-level
			// wedge is.
			opts := cache.Options{Namespace: ns, TTL: time.Hour, ComputeTimeout: 100 * time.Millisecond, WaitTimeout: time.Second}
			var c, other *cache.Cache[string]
			if local {
				c = newCache[string](t, nil, opts)
			} else {
				rs := replicas[string](t, 2, opts)
				c, other = rs[0], rs[1]
			}
			h := newHeld(t, "late")
			const callers = 20
			results := make(chan timed[valErr[string]], callers)
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					start := time.Now()
					v, err := c.GetOrCompute(bounded(t, 30*time.Second), "k", h.fn)
					results <- timed[valErr[string]]{valErr[string]{v, err}, time.Since(start)}
				})
			}
			within(t, h.calls, 5*time.Second, "the compute starting")
			for i := range callers {
				r, ok := tryWithin(results, 2*time.Second)
				if !ok {
					h.Release()
					waitGroupWithin(t, &wg, 10*time.Second, "the callers returning once the fn was released")
					t.Fatalf("only %d of %d callers released within 2s of a compute ignoring its context (ComputeTimeout 100ms)", i, callers)
				}
				if !errors.Is(r.v.err, cache.ErrComputeTimeout) || !errors.Is(r.v.err, context.DeadlineExceeded) {
					t.Errorf("a caller of the timed-out compute after %s: %q, %v; want ErrComputeTimeout, matching context.DeadlineExceeded", r.took, r.v.v, r.v.err)
				}
			}
			waitGroupWithin(t, &wg, 5*time.Second, "the released callers' goroutines ending")
			// Not wedged: with the first fn still blocked, a new call computes.
			o := &origin[string]{value: "fresh"}
			ch := async(func() valErr[string] {
				v, err := c.GetOrCompute(bounded(t, 10*time.Second), "k", o.fn)
				return valErr[string]{v, err}
			})
			r, ok := tryWithin(ch, 3*time.Second)
			if !ok {
				h.Release()
				r = within(t, ch, 10*time.Second, "the later call returning after the first fn was released")
				t.Fatalf("the key stayed wedged while the timed-out fn ran: a later call returned only after it was released (%s): %q, %v", r.took, r.v.v, r.v.err)
			}
			if r.v.err != nil || r.v.v != "fresh" || o.calls.Load() != 1 {
				t.Fatalf("a later call: %q, %v, %d computes; want a fresh compute", r.v.v, r.v.err, o.calls.Load())
			}
			// The timed-out fn returns now: its result must be discarded.
			h.Release()
			within(t, h.returned, 5*time.Second, "the timed-out fn returning")
			if local {
				return // nothing outside the process to read from once it is closed
			}
			closed := async(func() error { return c.Close() })
			if err := within(t, closed, 10*time.Second, "Close returning after the timed-out fn did").v; err != nil {
				t.Fatal(err)
			}
			// "fresh" is stored unless the later call computed past a lease the
			// timed-out compute still held (BusyCompute does not store); "late"
			// must never be.
			if v, found, err := other.Get(bounded(t, 5*time.Second), "k"); err != nil || (found && v != "fresh") {
				t.Fatalf("after the timed-out fn returned: another replica reads %q found=%v err=%v; the discarded result was stored", v, found, err)
			}
		})
	}
}

// Issue 14, defect 6, the batch path (derived: "one implementation per
// key" for both paths): a batch fn that ignores its context releases the
// GetOrComputeMany caller after about ComputeTimeout (100 ms; bound 2 s)
// with an error matching context.DeadlineExceeded for every key it was
// computing, in Redis and in process-local mode; the keys are not wedged.
func TestComputeTimeoutReleasesBatchCallers(t *testing.T) {
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) {
			opts := cache.Options{TTL: time.Hour, ComputeTimeout: 100 * time.Millisecond, WaitTimeout: time.Second}
			var c *cache.Cache[string]
			if local {
				c = newCache[string](t, nil, opts)
			} else {
				c = newCache[string](t, redistest.Client(t), opts)
			}
			h := newHeld(t, "")
			keys := []string{"a", "b"}
			type res struct {
				m   map[string]string
				err error
			}
			ch := async(func() res {
				m, err := c.GetOrComputeMany(bounded(t, 30*time.Second), keys, h.batch("late:"))
				return res{m, err}
			})
			r, ok := tryWithin(ch, 2*time.Second)
			if !ok {
				h.Release()
				r = within(t, ch, 10*time.Second, "the batch returning after its fn was released")
				t.Fatalf("a batch whose fn ignores its context returned after %s (ComputeTimeout 100ms, bound 2s): %v, %v", r.took, r.v.m, r.v.err)
			}
			var ke cache.KeyErrors
			if !errors.As(r.v.err, &ke) || len(r.v.m) != 0 {
				t.Fatalf("a timed-out batch: %v, %v; want KeyErrors for every key", r.v.m, r.v.err)
			}
			for _, k := range keys {
				if !errors.Is(ke[k], cache.ErrComputeTimeout) || !errors.Is(ke[k], context.DeadlineExceeded) {
					t.Errorf("key %q: %v, want ErrComputeTimeout, matching context.DeadlineExceeded", k, ke[k])
				}
			}
			got, err := c.GetOrComputeMany(bounded(t, 10*time.Second), keys, valuesOf)
			if err != nil || got["a"] != "v:a" || got["b"] != "v:b" {
				t.Fatalf("a later batch while the timed-out fn still runs: %v, %v", got, err)
			}
		})
	}
}

// A caller's deadline holds when Redis goes silent in the middle of a load,
// after the claim, with a budget far above the deadline: the fill (compute
// succeeded) or the abandon (compute failed) must not hold the caller past
// its deadline. abandon runs under context.WithoutCancel bounded by 1 s, so
// this is where a deadline could leak.
func TestDeadlineHoldsWhenRedisHangsAfterTheClaim(t *testing.T) {
	const deadline = 300 * time.Millisecond
	for _, cfg := range clientConfigs {
		for _, fail := range []bool{false, true} {
			for _, batch := range []bool{false, true} {
				name := fmt.Sprintf("%s/fail=%v/batch=%v", cfg.name, fail, batch)
				t.Run(name, func(t *testing.T) {
					p := newProxy(t)
					c := budgeted(t, cfg.opts(p.Addr()), cache.Options{Namespace: redistest.Prefix(t), RedisTimeout: 5 * time.Second})
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					compute := func() error {
						p.SetPartition(true) // Redis goes silent while the origin runs
						if fail {
							return errors.New("origin failed")
						}
						return nil
					}
					start := time.Now()
					if batch {
						_, _ = c.GetOrComputeMany(ctx, []string{"a", "b"}, func(context.Context, []string) (map[string]string, error) {
							if err := compute(); err != nil {
								return nil, err
							}
							return map[string]string{"a": "v", "b": "v"}, nil
						})
					} else {
						_, _ = c.GetOrCompute(ctx, "a", func(context.Context) (string, error) { return "v", compute() })
					}
					took := time.Since(start)
					p.SetPartition(false)
					if took > deadline+perCallBound {
						t.Errorf("call took %s with a %s deadline (budget 5s)", took, deadline)
					}
				})
			}
		}
	}
}
