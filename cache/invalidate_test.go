package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// invalidationStorm is one try at breaking the invalidation guarantee: keys
// already stored (and in L1), and 100 computes in flight, half released
// during the invalidation and half after it returned, with waiters on the
// other replicas (single keys and a batch). Every value says the phase its
// compute began in: p0 before the invalidation was called, p1 after.
type invalidationStorm struct {
	t       *testing.T
	caches  []*cache.Cache[string]
	tags    []string // what fn attaches (none for Clear)
	phase   atomic.Int32
	started chan string
	during  chan struct{} // released while the invalidation runs
	after   chan struct{} // released once it returned
}

const stormKeys = 50 // per group: pre (stored), during, after

func (s *invalidationStorm) fn(key string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		v := fmt.Sprintf("p%d:%s", s.phase.Load(), key)
		if len(s.tags) > 0 {
			if err := cache.SetTags(ctx, append([]string{"key:" + key}, s.tags...)...); err != nil {
				return "", err
			}
		}
		if !strings.HasPrefix(key, "pre-") {
			select {
			case s.started <- key:
			default:
			}
			if strings.HasPrefix(key, "during-") {
				<-s.during
			} else {
				<-s.after
			}
		}
		return v, nil
	}
}

func (s *invalidationStorm) batchFn(ctx context.Context, keys []string) (map[string]string, error) {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		v, err := s.fn(k)(ctx)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

func groupKeys(group string) []string {
	keys := make([]string, stormKeys)
	for i := range keys {
		keys[i] = fmt.Sprint(group, "-", i)
	}
	return keys
}

// run stores the pre keys, starts the computes, invalidates with inv, and
// checks every answer given after inv returned.
func (s *invalidationStorm) run(inv func(ctx context.Context, c *cache.Cache[string]) error) {
	t := s.t
	ctx := context.Background()
	s.started = make(chan string, 4*stormKeys)
	s.during, s.after = make(chan struct{}), make(chan struct{})
	for _, k := range groupKeys("pre") {
		for _, c := range s.caches { // stored, and in every L1
			if v, err := c.GetOrCompute(ctx, k, s.fn(k)); err != nil || v != "p0:"+k {
				t.Fatalf("pre %s: %q %v", k, v, err)
			}
		}
	}
	// The computes: each in-flight key led by the first replica...
	inflight := append(groupKeys("during"), groupKeys("after")...)
	type answer struct {
		key, v, via string
		err         error
	}
	answers := make(chan answer, 16*stormKeys)
	var wg sync.WaitGroup
	for _, k := range inflight {
		wg.Go(func() {
			v, err := s.caches[0].GetOrCompute(ctx, k, s.fn(k))
			answers <- answer{k, v, "leader", err}
		})
	}
	for range inflight {
		within(t, s.started, 20*time.Second, "a compute to start")
	}
	// ... and waited for by the others, one by one and in a batch.
	for i, c := range s.caches[1:] {
		for _, k := range inflight {
			wg.Go(func() {
				v, err := c.GetOrCompute(ctx, k, s.fn(k))
				answers <- answer{k, v, fmt.Sprint("waiter ", i+1), err}
			})
		}
		wg.Go(func() {
			got, err := c.GetOrComputeMany(ctx, groupKeys("after"), s.batchFn)
			for _, k := range groupKeys("after") {
				answers <- answer{k, got[k], fmt.Sprint("batch ", i+1), err}
			}
		})
	}
	s.phase.Store(1)
	invDone := make(chan error, 1)
	go func() { invDone <- inv(ctx, s.caches[len(s.caches)-1]) }()
	close(s.during) // these computes end while the invalidation runs
	if err := within(t, invDone, 20*time.Second, "the invalidation"); err != nil {
		t.Fatal(err)
	}
	close(s.after) // these end after it returned: they began before it
	wg.Wait()
	close(answers)
	for a := range answers {
		switch {
		case a.err != nil:
			t.Errorf("%s %s: %v", a.via, a.key, a.err)
		case strings.HasPrefix(a.key, "after-") && a.v != "p1:"+a.key:
			t.Errorf("%s %s: served %q after the invalidation returned", a.via, a.key, a.v)
		}
	}
	// After it returned, every path on every replica.
	all := append(groupKeys("pre"), inflight...)
	for i, c := range s.caches {
		for _, k := range all {
			if v, found, err := c.Get(ctx, k); err != nil || found && v != "p1:"+k {
				t.Errorf("replica %d Get %s: %q %v %v", i, k, v, found, err)
			}
			if v, err := c.GetOrCompute(ctx, k, s.fn(k)); err != nil || v != "p1:"+k {
				t.Errorf("replica %d GetOrCompute %s: %q %v", i, k, v, err)
			}
		}
		got, err := c.GetOrComputeMany(ctx, all, s.batchFn)
		if err != nil {
			t.Errorf("replica %d GetOrComputeMany: %v", i, err)
		}
		for _, k := range all {
			if got[k] != "p1:"+k {
				t.Errorf("replica %d GetOrComputeMany %s: %q", i, k, got[k])
			}
		}
	}
	var recomputed, invalidated uint64
	for _, c := range s.caches {
		recomputed += c.Stats().Recomputed
		invalidated += c.Stats().Invalidated
	}
	t.Logf("recomputed %d (in flight when invalidated), entries refused %d", recomputed, invalidated)
	if recomputed < stormKeys {
		t.Errorf("recomputed %d, want at least the %d computes released after the invalidation", recomputed, stormKeys)
	}
}

// fleets are the deployments the guarantee is tried on.
var fleets = []struct {
	name   string
	client func(testing.TB) redis.UniversalClient
}{
	{"standalone", func(t testing.TB) redis.UniversalClient { return redistest.Client(t) }},
	{"cluster", func(t testing.TB) redis.UniversalClient { return redistest.ClusterClient(t) }},
}

// After InvalidateTags returns, no replica serves a tagged value whose
// compute began before the call, whatever the path, including the 100
// computes in flight during the call: on a standalone Redis and on a
// 3-master Cluster (the tags' marks, the counter and the entries live in
// different slots), with L1 on and off.
func TestInvalidateTagsWhileComputing(t *testing.T) {
	for _, f := range fleets {
		for _, l1 := range []int{0, 1000} {
			t.Run(fmt.Sprintf("%s/L1=%d", f.name, l1), func(t *testing.T) {
				opts := cache.Options{TTL: time.Hour, L1Size: l1, L1TTL: time.Hour, WaitTimeout: time.Minute}
				s := &invalidationStorm{t: t, caches: replicasOn[string](t, 3, f.client, opts), tags: []string{"t"}}
				s.run(func(ctx context.Context, c *cache.Cache[string]) error { return c.InvalidateTags(ctx, "t") })
			})
		}
	}
}

// Clear during a storm: the same guarantee for every entry of the
// namespace, untagged.
func TestClearWhileComputing(t *testing.T) {
	for _, f := range fleets {
		for _, l1 := range []int{0, 1000} {
			t.Run(fmt.Sprintf("%s/L1=%d", f.name, l1), func(t *testing.T) {
				opts := cache.Options{TTL: time.Hour, L1Size: l1, L1TTL: time.Hour, WaitTimeout: time.Minute}
				s := &invalidationStorm{t: t, caches: replicasOn[string](t, 3, f.client, opts)}
				s.run(func(ctx context.Context, c *cache.Cache[string]) error { return c.Clear(ctx) })
			})
		}
	}
}

// Process-local mode: the same guarantee with in-process marks (no wait).
func TestInvalidateProcessLocal(t *testing.T) {
	for _, name := range []string{"InvalidateTags", "Clear"} {
		t.Run(name, func(t *testing.T) {
			c := newCache[string](t, nil, cache.Options{TTL: time.Hour, WaitTimeout: time.Minute})
			s := &invalidationStorm{t: t, caches: []*cache.Cache[string]{c}, tags: []string{"t"}}
			s.run(func(ctx context.Context, c *cache.Cache[string]) error {
				if name == "Clear" {
					return c.Clear(ctx)
				}
				return c.InvalidateTags(ctx, "t")
			})
		})
	}
}

// ExpireTags (soft): the tagged value is expired, not gone. It is not
// served while the origin answers (a Get finds nothing, a GetOrCompute
// recomputes), but stands in when the origin fails, inside StaleIfError.
// InvalidateTags (hard, the default) leaves nothing to stand in.
func TestExpireTagsServesStaleOnlyOnError(t *testing.T) {
	ctx := context.Background()
	for _, f := range fleets[:1] {
		a, b := func() (*cache.Cache[string], *cache.Cache[string]) {
			cs := replicasOn[string](t, 2, f.client, cache.Options{TTL: time.Hour, StaleIfError: time.Hour, FailSafeThrottle: -1})
			return cs[0], cs[1]
		}()
		tagged := func(v string) func(context.Context) (string, error) {
			return func(ctx context.Context) (string, error) { return v, cache.SetTags(ctx, "t") }
		}
		failing := func(context.Context) (string, error) { return "", errors.New("origin down") }
		for _, k := range []string{"soft", "hard"} {
			if v, err := a.GetOrCompute(ctx, k, tagged("old-"+k)); err != nil || v != "old-"+k {
				t.Fatalf("%s: %q %v", k, v, err)
			}
		}
		if err := b.ExpireTags(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if _, found, err := a.Get(ctx, "soft"); found || err != nil {
			t.Fatalf("Get after ExpireTags: found %v, %v", found, err)
		}
		r, err := a.Fetch(ctx, "soft", failing)
		if err != nil || r.Value != "old-soft" || r.Outcome != cache.Stale || r.Err == nil {
			t.Fatalf("failing origin after ExpireTags: %+v %v", r, err)
		}
		r, err = a.Fetch(ctx, "soft", tagged("new-soft"))
		if err != nil || r.Value != "new-soft" || r.Outcome != cache.Miss {
			t.Fatalf("working origin after ExpireTags: %+v %v", r, err)
		}
		// The hard invalidation of the same tag: no stand-in.
		if err := b.InvalidateTags(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if r, err := a.Fetch(ctx, "hard", failing); err == nil {
			t.Fatalf("failing origin after InvalidateTags served %+v", r)
		}
		if r, err := b.Fetch(ctx, "soft", failing); err == nil {
			t.Fatalf("failing origin after InvalidateTags (other replica) served %+v", r)
		}
	}
}

// Set takes per-call options: WithTTL and WithStale shape the windows,
// WithTags makes the value invalidable by tag; a Set after an invalidation
// is not invalidated by it. Bad input is an error, never a panic.
func TestSetOptions(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			var rdb redis.UniversalClient
			if mode == "redis" {
				rdb = redistest.Client(t)
			}
			c := newCache[string](t, rdb, cache.Options{TTL: time.Hour})
			clk := cache.NewClock()
			cache.UseClock(c, clk)
			if err := c.Set(ctx, "short", "v", cache.WithTTL(10*time.Second), cache.WithStale(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, "long", "v", cache.WithTags("a", "b"), cache.WithTags("c")); err != nil {
				t.Fatal(err)
			}
			clk.Advance(11 * time.Second)
			r, err := c.Fetch(ctx, "short", func(context.Context) (string, error) { return "computed", nil })
			if err != nil || r.Value != "v" || r.Outcome != cache.Stale {
				t.Fatalf("WithTTL(10s)+WithStale(1m) after 11s: %+v %v", r, err)
			}
			if v, found, err := c.Get(ctx, "long"); !found || err != nil || v != "v" {
				t.Fatalf("long: %q %v %v", v, found, err)
			}
			if err := c.InvalidateTags(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			if _, found, err := c.Get(ctx, "long"); found || err != nil {
				t.Fatalf("WithTags(c) after InvalidateTags(c): found %v, %v", found, err)
			}
			if err := c.Set(ctx, "long", "again", cache.WithTags("c")); err != nil {
				t.Fatal(err)
			}
			if v, found, err := c.Get(ctx, "long"); !found || err != nil || v != "again" {
				t.Fatalf("Set after the invalidation: %q %v %v", v, found, err)
			}
			// InvalidateTags without tags is a no-op, never a Clear.
			if err := c.InvalidateTags(ctx); err != nil {
				t.Fatal(err)
			}
			if _, found, _ := c.Get(ctx, "long"); !found {
				t.Fatal("InvalidateTags() cleared the namespace")
			}
			many := make([]string, 33)
			for i := range many {
				many[i] = fmt.Sprint("t", i)
			}
			for _, tc := range []struct {
				name string
				err  error
				set  func() error
			}{
				{"negative TTL", cache.ErrInvalidOptions, func() error { return c.Set(ctx, "k", "v", cache.WithTTL(-time.Second)) }},
				{"zero TTL", cache.ErrInvalidOptions, func() error { return c.Set(ctx, "k", "v", cache.WithTTL(0)) }},
				{"negative stale", cache.ErrInvalidOptions, func() error { return c.Set(ctx, "k", "v", cache.WithStale(-1)) }},
				{"empty tag", cache.ErrInvalidTag, func() error { return c.Set(ctx, "k", "v", cache.WithTags("")) }},
				{"space in tag", cache.ErrInvalidTag, func() error { return c.Set(ctx, "k", "v", cache.WithTags("a b")) }},
				{"brace in tag", cache.ErrInvalidTag, func() error { return c.Set(ctx, "k", "v", cache.WithTags("{a}")) }},
				{"long tag", cache.ErrInvalidTag, func() error { return c.Set(ctx, "k", "v", cache.WithTags(strings.Repeat("x", 129))) }},
				{"33 tags", cache.ErrInvalidTag, func() error { return c.Set(ctx, "k", "v", cache.WithTags(many...)) }},
				{"InvalidateTags empty", cache.ErrInvalidTag, func() error { return c.InvalidateTags(ctx, "ok", "") }},
				{"ExpireTags bad byte", cache.ErrInvalidTag, func() error { return c.ExpireTags(ctx, "é") }},
				{"SetTags in fn", cache.ErrInvalidTag, func() error {
					_, err := c.GetOrCompute(ctx, "k2", func(ctx context.Context) (string, error) { return "v", cache.SetTags(ctx, "a\n") })
					return err
				}},
			} {
				if err := tc.set(); !errors.Is(err, tc.err) {
					t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
				}
			}
			if _, found, _ := c.Get(ctx, "k"); found {
				t.Error("a Set with bad options stored its value")
			}
			if err := cache.SetTags(ctx, "a"); err == nil {
				t.Error("SetTags outside a compute function: no error")
			}
		})
	}
}

// With Redis down, InvalidateTags and Clear fail at once with
// ErrUnavailable once the breaker is open (and with an error matching it
// before).
func TestInvalidateRedisDown(t *testing.T) {
	ctx := context.Background()
	c := newCache[string](t, downClient(t), cache.Options{BreakerThreshold: 1})
	for range 2 {
		if err := c.InvalidateTags(ctx, "t"); !errors.Is(err, cache.ErrUnavailable) {
			t.Fatalf("InvalidateTags: %v", err)
		}
		if err := c.Clear(ctx); !errors.Is(err, cache.ErrUnavailable) {
			t.Fatalf("Clear: %v", err)
		}
	}
}

// Tagged values reach every replica's reads with their tags: a batch
// compute's SetTags apply to each of its keys, and InvalidateTags from any
// replica refuses them on all; a key tagged otherwise is untouched.
func TestInvalidateTagsBatchAndOtherTags(t *testing.T) {
	ctx := context.Background()
	cs := replicas[string](t, 2, cache.Options{TTL: time.Hour, L1Size: 100})
	var calls atomic.Int32
	batch := func(ctx context.Context, keys []string) (map[string]string, error) {
		calls.Add(1)
		out := map[string]string{}
		for _, k := range keys {
			out[k] = "v:" + k
		}
		return out, cache.SetTags(ctx, "group")
	}
	if _, err := cs[0].GetOrComputeMany(ctx, []string{"x", "y"}, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := cs[0].GetOrCompute(ctx, "z", func(ctx context.Context) (string, error) { return "z", cache.SetTags(ctx, "other") }); err != nil {
		t.Fatal(err)
	}
	if _, err := cs[1].GetOrComputeMany(ctx, []string{"x", "y"}, batch); err != nil || calls.Load() != 1 {
		t.Fatalf("hit: %v, %d calls", err, calls.Load())
	}
	if err := cs[1].InvalidateTags(ctx, "group"); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		for _, k := range []string{"x", "y"} {
			if _, found, err := c.Get(ctx, k); found || err != nil {
				t.Errorf("replica %d: %s still found (%v)", i, k, err)
			}
		}
		if v, found, err := c.Get(ctx, "z"); !found || err != nil || v != "z" {
			t.Errorf("replica %d: z, tagged otherwise: %q %v %v", i, v, found, err)
		}
	}
}

// While Redis is unreachable, values computed in degraded mode are kept for
// DegradedTTL; an InvalidateTags or Clear in this process (which fails with
// ErrUnavailable) still drops them.
func TestInvalidateDropsDegradedKeptValues(t *testing.T) {
	ctx := context.Background()
	c := newCache[string](t, downClient(t), cache.Options{BreakerThreshold: 1, DegradedTTL: time.Hour})
	var calls atomic.Int32
	fn := func(context.Context) (string, error) { return fmt.Sprint("v", calls.Add(1)), nil }
	for range 2 {
		if r, err := c.Fetch(ctx, "k", fn); err != nil || r.Value != "v1" || r.Outcome != cache.Degraded {
			t.Fatalf("%+v %v", r, err)
		}
	}
	for _, inv := range []func() error{
		func() error { return c.InvalidateTags(ctx, "t") },
		func() error { return c.Clear(ctx) },
	} {
		before := calls.Load()
		if err := inv(); !errors.Is(err, cache.ErrUnavailable) {
			t.Fatalf("invalidate with Redis down: %v", err)
		}
		if r, err := c.Fetch(ctx, "k", fn); err != nil || r.Value != fmt.Sprint("v", before+1) {
			t.Fatalf("after the invalidation: %+v %v (a kept value answered)", r, err)
		}
	}
}

// A stale value (inside its Stale window) that was invalidated is not
// served stale: the caller waits for the recompute, on every replica.
func TestInvalidateTagsStaleNotServed(t *testing.T) {
	ctx := context.Background()
	cs := replicas[string](t, 2, cache.Options{TTL: time.Minute, Stale: time.Hour})
	clk := cache.NewClock()
	for _, c := range cs {
		cache.UseClock(c, clk)
	}
	load := func(v string) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) { return v, cache.SetTags(ctx, "t") }
	}
	if _, err := cs[0].GetOrCompute(ctx, "k", load("old")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute) // stale now
	if err := cs[0].InvalidateTags(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if v, found, err := c.Get(ctx, "k"); found || err != nil {
			t.Fatalf("replica %d Get: %q %v %v", i, v, found, err)
		}
	}
	if r, err := cs[1].Fetch(ctx, "k", load("new")); err != nil || r.Value != "new" || r.Outcome != cache.Miss {
		t.Fatalf("after InvalidateTags: %+v %v (the stale value answered)", r, err)
	}
}
