package cache_test

import (
	"context"
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

// The invalidation guarantee under a storm: InvalidateTags and Clear
// called while computes, fills and waiters are in flight on every replica.

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
