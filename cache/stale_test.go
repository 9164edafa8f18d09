package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// writeStale stores v for key with a 1m TTL and returns a clock moved past
// it: the entry is stale (or expired) for every reader of the namespace
// that uses the clock (see clocked), and Redis keeps it meanwhile.
func writeStale[V any](t *testing.T, rdb redis.UniversalClient, ns, key string, v V, opts cache.Options) *cache.Clock {
	t.Helper()
	return writeStaleAt(t, cache.NewClock(), rdb, ns, key, v, opts)
}

// writeStaleAt is writeStale on the clock clk.
func writeStaleAt[V any](t *testing.T, clk *cache.Clock, rdb redis.UniversalClient, ns, key string, v V, opts cache.Options) *cache.Clock {
	t.Helper()
	opts.Namespace, opts.TTL = ns, time.Minute
	w := clocked(clk, newCache[V](t, rdb, opts))
	if err := w.Set(context.Background(), key, v); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute + time.Millisecond)
	return clk
}

// clocked makes caches read time from clk and returns the first.
func clocked[V any](clk *cache.Clock, caches ...*cache.Cache[V]) *cache.Cache[V] {
	for _, c := range caches {
		cache.UseClock(c, clk)
	}
	return caches[0]
}

// waitFor polls cond, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	pollFor(t, what, 10*time.Second, time.Millisecond, cond)
}

// 4 replicas x 100 goroutines on a stale key: every caller gets the stale
// value without waiting on fn, fn runs once, and then the fresh value is served.
func TestStaleKeyAcrossReplicas(t *testing.T) {
	ns := redistest.Prefix(t)
	clk := writeStale(t, redistest.Client(t), ns, "k", "old", cache.Options{Stale: time.Hour})
	caches := replicas[string](t, 4, cache.Options{Namespace: ns, TTL: time.Hour, Stale: time.Hour})
	clocked(clk, caches...)
	o := &origin[string]{value: "new", release: make(chan struct{})}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range caches {
		for range 100 {
			wg.Go(func() {
				<-start
				r, err := c.Fetch(context.Background(), "k", o.fn)
				if err != nil || r.Value != "old" || r.Outcome != cache.Stale {
					t.Errorf("%+v %v", r, err)
				}
			})
		}
	}
	close(start)
	wg.Wait() // all 400 answered while fn is still held: nobody waited on it
	close(o.release)
	waitFor(t, "the refresh", func() bool {
		v, _, _ := caches[0].Get(context.Background(), "k")
		return v == "new"
	})
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times across the fleet, want 1", n)
	}
	for _, c := range caches {
		r, err := c.Fetch(context.Background(), "k", o.fn)
		if err != nil || r.Value != "new" || r.Outcome != cache.Hit {
			t.Fatalf("after the refresh: %+v %v", r, err)
		}
	}
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times", n)
	}
}

// expiredEntry returns a cache (on Redis or process-local) whose key "k"
// holds "old", written with a TTL that has run out on the returned clock.
func expiredEntry(t *testing.T, mode string, opts cache.Options) (*cache.Cache[string], *cache.Clock) {
	t.Helper()
	if mode == "redis" {
		ns := redistest.Prefix(t)
		rdb := redistest.Client(t)
		clk := writeStale(t, rdb, ns, "k", "old", opts)
		opts.Namespace = ns
		return clocked(clk, newCache[string](t, rdb, opts)), clk
	}
	clk := cache.NewClock()
	opts.TTL = time.Minute
	c := clocked(clk, newCache[string](t, nil, opts))
	if err := c.Set(context.Background(), "k", "old"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute + time.Millisecond)
	return c, clk
}

func TestStaleIfError(t *testing.T) {
	originDown := errors.New("origin down")
	failing := func(context.Context) (string, error) { return "", originDown }
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode+"/inside window: stale served, entry kept", func(t *testing.T) {
			c, _ := expiredEntry(t, mode, cache.Options{StaleIfError: time.Hour, FailSafeThrottle: -1})
			for i := range 3 {
				r, err := c.Fetch(context.Background(), "k", failing)
				if err != nil || r.Value != "old" || r.Outcome != cache.Stale || !errors.Is(r.Err, originDown) {
					t.Fatalf("call %d: %+v %v", i, r, err)
				}
				v, err := c.GetOrCompute(context.Background(), "k", failing)
				if err != nil || v != "old" {
					t.Fatalf("GetOrCompute: %q %v", v, err)
				}
			}
			if st := c.Stats(); st.StaleOnError != 6 || st.ComputeErrors != 6 || st.FailSafe != 0 {
				t.Fatalf("stats %+v", st)
			}
			// The origin recovers: the entry is replaced.
			r, err := c.Fetch(context.Background(), "k", func(context.Context) (string, error) { return "new", nil })
			if err != nil || r.Value != "new" || r.Outcome != cache.Miss || r.Err != nil {
				t.Fatalf("after recovery: %+v %v", r, err)
			}
		})
		t.Run(mode+"/fail-safe throttle: one origin call per throttle", func(t *testing.T) {
			c, clk := expiredEntry(t, mode, cache.Options{StaleIfError: time.Hour, FailSafeThrottle: time.Minute})
			calls := 0
			counted := func(ctx context.Context) (string, error) { calls++; return failing(ctx) }
			r, err := c.Fetch(context.Background(), "k", counted)
			if err != nil || r.Value != "old" || r.Outcome != cache.Stale || !errors.Is(r.Err, originDown) {
				t.Fatalf("first failure: %+v %v", r, err)
			}
			for i := range 5 { // the re-armed value answers; the origin is left alone
				r, err := c.Fetch(context.Background(), "k", counted)
				if err != nil || r.Value != "old" || r.Outcome != cache.Stale {
					t.Fatalf("call %d in the throttle: %+v %v", i, r, err)
				}
			}
			if st := c.Stats(); calls != 1 || st.FailSafe != 1 || st.Refreshes != 0 {
				t.Fatalf("origin called %d times in one throttle, stats %+v", calls, st)
			}
			clk.Advance(time.Minute + time.Millisecond)
			r, err = c.Fetch(context.Background(), "k", func(context.Context) (string, error) { return "new", nil })
			if err != nil || r.Value != "new" || r.Outcome != cache.Miss {
				t.Fatalf("after the throttle: %+v %v", r, err)
			}
		})
		t.Run(mode+"/past window: error", func(t *testing.T) {
			c, clk := expiredEntry(t, mode, cache.Options{StaleIfError: 5 * time.Millisecond})
			clk.Advance(10 * time.Millisecond) // past TTL + StaleIfError
			if r, err := c.Fetch(context.Background(), "k", failing); !errors.Is(err, originDown) || r.Value != "" {
				t.Fatalf("%+v %v", r, err)
			}
		})
	}
}

// A failing background refresh keeps the stale entry.
func TestFailedRefreshKeepsEntry(t *testing.T) {
	ns := redistest.Prefix(t)
	rdb := redistest.Client(t)
	clk := writeStale(t, rdb, ns, "k", "old", cache.Options{Stale: time.Hour})
	c := clocked(clk, newCache[string](t, rdb, cache.Options{Namespace: ns, Stale: time.Hour}))
	ran := make(chan struct{})
	r, err := c.Fetch(context.Background(), "k", func(context.Context) (string, error) {
		close(ran)
		return "", errors.New("origin down")
	})
	if err != nil || r.Outcome != cache.Stale || r.Value != "old" {
		t.Fatalf("%+v %v", r, err)
	}
	<-ran
	waitFor(t, "the refresh to end", func() bool { return c.Stats().ComputeErrors == 1 })
	waitFor(t, "the lease to be released", func() bool {
		n, _ := rdb.Exists(context.Background(), "{"+ns+":k}:l").Result()
		return n == 0
	})
	r, err = c.Fetch(context.Background(), "k", func(context.Context) (string, error) { return "new", nil })
	if err != nil || r.Value != "old" || r.Outcome != cache.Stale {
		t.Fatalf("entry not kept after the failed refresh: %+v %v", r, err)
	}
}

func TestNegativeCaching(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			opts := cache.Options{NegativeTTL: 50 * time.Millisecond, Namespace: redistest.Prefix(t)}
			var caches []*cache.Cache[int]
			if mode == "redis" {
				caches = replicas[int](t, 3, opts)
			} else {
				caches = []*cache.Cache[int]{newCache[int](t, nil, opts)}
			}
			clk := cache.NewClock()
			clocked(clk, caches...)
			var calls int
			notFound := func(context.Context) (int, error) {
				calls++
				return 0, fmt.Errorf("user 7: %w", cache.ErrNotFound)
			}
			ctx := context.Background()
			if _, err := caches[0].GetOrCompute(ctx, "user:7", notFound); !errors.Is(err, cache.ErrNotFound) {
				t.Fatalf("err=%v", err)
			}
			for _, c := range caches {
				for range 5 {
					r, err := c.Fetch(ctx, "user:7", notFound)
					if !errors.Is(err, cache.ErrNotFound) || r.Outcome != cache.Hit {
						t.Fatalf("cached not-found: %+v %v", r, err)
					}
				}
				if _, found, err := c.Get(ctx, "user:7"); found || err != nil {
					t.Fatalf("Get of a cached not-found: found=%v err=%v", found, err)
				}
			}
			if calls != 1 {
				t.Fatalf("fn ran %d times for a cached not-found", calls)
			}
			if st := caches[0].Stats(); st.NegativeStored != 1 || st.NegativeHits != 5 || st.ComputeErrors != 0 {
				t.Fatalf("stats %+v", st)
			}
			clk.Advance(60 * time.Millisecond) // past NegativeTTL
			if _, err := caches[0].GetOrCompute(ctx, "user:7", notFound); !errors.Is(err, cache.ErrNotFound) || calls != 2 {
				t.Fatalf("after NegativeTTL: err=%v calls=%d", err, calls)
			}
		})
	}
}

// Jitter: keys written at once get TTLs spread across the jitter window.
func TestJitterSpreadsExpiries(t *testing.T) {
	rdb := redistest.Client(t)
	c := newCache[int](t, rdb, cache.Options{TTL: 100 * time.Second, Jitter: 0.5})
	ctx := context.Background()
	const n = 200
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for i := range n {
		key := fmt.Sprint("k", i)
		if _, err := c.GetOrCompute(ctx, key, func(context.Context) (int, error) { return i, nil }); err != nil {
			t.Fatal(err)
		}
		ttl := rdb.PTTL(ctx, "{"+c.Namespace()+":"+key+"}:v").Val()
		if ttl < 49*time.Second || ttl > 150*time.Second {
			t.Fatalf("key %d: TTL %s outside 100s ± 50%%", i, ttl)
		}
		lo, hi = min(lo, ttl), max(hi, ttl)
	}
	if lo > 60*time.Second || hi < 140*time.Second {
		t.Fatalf("%d TTLs only span [%s, %s]", n, lo, hi)
	}
}

func TestComputeSetsItsOwnTTL(t *testing.T) {
	rdb := redistest.Client(t)
	c := newCache[string](t, rdb, cache.Options{TTL: time.Hour})
	ctx := context.Background()
	if cache.SetTTL(ctx, time.Second) {
		t.Fatal("SetTTL outside a compute reported success")
	}
	_, err := c.GetOrCompute(ctx, "k", func(ctx context.Context) (string, error) {
		if !cache.SetTTL(ctx, 3*time.Second) {
			t.Error("SetTTL inside the compute failed")
		}
		return "v", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, "{"+c.Namespace()+":k}:v").Val(); ttl <= 0 || ttl > 3*time.Second {
		t.Fatalf("TTL %s, want the compute's 3s", ttl)
	}
}

// XFetch: with a huge Beta every hit refreshes early; with Beta 0 none does.
func TestEarlyRefresh(t *testing.T) {
	for _, tc := range []struct {
		beta float64
		want int32
	}{{1e12, 2}, {0, 1}} {
		t.Run(fmt.Sprint("beta=", tc.beta), func(t *testing.T) {
			c := newCache[int](t, redistest.Client(t), cache.Options{TTL: time.Hour, Beta: tc.beta})
			o := &origin[int]{value: 1, delay: 2 * time.Millisecond}
			ctx := context.Background()
			if r, err := c.Fetch(ctx, "k", o.fn); err != nil || r.Outcome != cache.Miss {
				t.Fatalf("%+v %v", r, err)
			}
			r, err := c.Fetch(ctx, "k", o.fn)
			if err != nil || r.Outcome != cache.Hit {
				t.Fatalf("%+v %v", r, err)
			}
			if tc.want == 2 {
				waitFor(t, "the early refresh", func() bool { return o.calls.Load() == 2 && c.Stats().Refreshes == 1 })
			} else {
				for range 50 {
					if _, err := c.Fetch(ctx, "k", o.fn); err != nil {
						t.Fatal(err)
					}
				}
				if err := c.Close(); err != nil { // waits for any background refresh
					t.Fatal(err)
				}
				if o.calls.Load() != 1 || c.Stats().Refreshes != 0 {
					t.Fatalf("Beta 0 refreshed early: %d calls", o.calls.Load())
				}
			}
		})
	}
}

func TestComputeSetsItsOwnStaleWindows(t *testing.T) {
	rdb := redistest.Client(t)
	c := newCache[string](t, rdb, cache.Options{TTL: time.Hour})
	ctx := context.Background()
	if cache.SetStale(ctx, time.Second, time.Second) {
		t.Fatal("SetStale outside a compute reported success")
	}
	_, err := c.GetOrCompute(ctx, "k", func(ctx context.Context) (string, error) {
		cache.SetTTL(ctx, 2*time.Second)
		cache.SetStale(ctx, 3*time.Second, 10*time.Second)
		return "v", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Kept for TTL + max(stale, stale-if-error) = 12s.
	if ttl := rdb.PTTL(ctx, "{"+c.Namespace()+":k}:v").Val(); ttl <= 11*time.Second || ttl > 12*time.Second {
		t.Fatalf("kept for %s, want 12s", ttl)
	}
}

type privateResult struct{ v string }

func (p *privateResult) Error() string { return "private: " + p.v }
func (p *privateResult) Unwrap() error { return cache.ErrUncacheable }

// An uncacheable result is handed back as is: not stored, and no stale value
// stands in for it.
func TestUncacheableResultIsNotReplacedByStale(t *testing.T) {
	ns := redistest.Prefix(t)
	rdb := redistest.Client(t)
	clk := writeStale(t, rdb, ns, "k", "old", cache.Options{StaleIfError: time.Hour})
	c := clocked(clk, newCache[string](t, rdb, cache.Options{Namespace: ns, StaleIfError: time.Hour}))
	r, err := c.Fetch(context.Background(), "k", func(context.Context) (string, error) { return "", &privateResult{"mine"} })
	var pr *privateResult
	if !errors.As(err, &pr) || pr.v != "mine" || r.Outcome != cache.Miss || r.Value != "" {
		t.Fatalf("%+v %v", r, err)
	}
	if st := c.Stats(); st.StaleOnError != 0 || st.ComputeErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
}
