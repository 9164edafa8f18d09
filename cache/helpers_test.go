package cache_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) {
	// The outage tests make go-redis log every failed dial; keep the output readable.
	redis.SetLogger(quietLogger{})
	redistest.Main(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// newCache returns a Cache in a namespace of the test's own, closed at
// cleanup. L1 is off unless opts sets L1Size: the tests pin the Redis path
// unless they turn L1 on, and L1 turns on by default only once the
// invalidation subscription is up, which would make whether a read reaches
// Redis a race. L1's default is pinned with newCacheAsConfigured
// (l1_default_test.go).
func newCache[V any](t testing.TB, rdb redis.UniversalClient, opts cache.Options) *cache.Cache[V] {
	t.Helper()
	if opts.L1Size == 0 {
		opts.L1Size = -1
	}
	return newCacheAsConfigured[V](t, rdb, opts)
}

// newCacheAsConfigured is newCache with opts.L1Size left as it is.
func newCacheAsConfigured[V any](t testing.TB, rdb redis.UniversalClient, opts cache.Options) *cache.Cache[V] {
	t.Helper()
	if opts.Namespace == "" {
		opts.Namespace = redistest.Prefix(t)
	}
	if opts.Logger == nil { // the library logs to slog.Default by default: keep test output readable
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RedisTimeout == 0 {
		// The suite runs under the race detector on a shared 2-core machine,
		// where one Redis step can stall past the 100 ms default budget and
		// turn a test's one compute into a degraded one. Tests of the budget
		// (budget_test.go) set it explicitly.
		opts.RedisTimeout = testRedisTimeout
	}
	c, err := cache.New[V](rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// newProxy starts a fault-injecting proxy in front of the package's Redis,
// closed at cleanup.
func newProxy(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(redistest.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// replicas returns n caches in one namespace, each with its own Redis
// client: n simulated processes of one fleet.
func replicas[V any](t testing.TB, n int, opts cache.Options) []*cache.Cache[V] {
	t.Helper()
	return replicasOn[V](t, n, func(t testing.TB) redis.UniversalClient { return redistest.Client(t) }, opts)
}

// replicasOn is [replicas] with clients from newClient (a Cluster's, a
// Sentinel deployment's).
func replicasOn[V any](t testing.TB, n int, newClient func(testing.TB) redis.UniversalClient, opts cache.Options) []*cache.Cache[V] {
	t.Helper()
	if opts.Namespace == "" {
		opts.Namespace = redistest.Prefix(t)
	}
	out := make([]*cache.Cache[V], n)
	for i := range out {
		out[i] = newCache[V](t, newClient(t), opts)
	}
	return out
}

// total sums one counter of the caches' Stats.
func total[V any](caches []*cache.Cache[V], counter func(cache.Stats) uint64) uint64 {
	var n uint64
	for _, c := range caches {
		n += counter(c.Stats())
	}
	return n
}

func waited(s cache.Stats) uint64   { return s.Waited }
func refills(s cache.Stats) uint64  { return s.Refills }
func degraded(s cache.Stats) uint64 { return s.Degraded }

// pollFor polls cond every interval until it holds, failing the test after
// timeout: for state that changes on its own (background work, Redis).
func pollFor(t testing.TB, what string, timeout, interval time.Duration, cond func() bool) {
	t.Helper()
	poll(t, timeout, interval, cond, func() string { return "timed out waiting for " + what })
}

// poll is the one poll loop of the tests: cond every interval until it
// holds, failing the test after timeout with why() (called then, so it can
// report the last state seen).
func poll(t testing.TB, timeout, interval time.Duration, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, why())
		}
		time.Sleep(interval) // the state changes on its own: poll it
	}
}

// origin is a compute function that counts its calls and can be held.
type origin[V any] struct {
	calls   atomic.Int32
	value   V
	started chan struct{} // receives once per call, when buffered
	release chan struct{} // when non-nil, each call waits for it to close
	delay   time.Duration
}

func (o *origin[V]) fn(ctx context.Context) (V, error) {
	o.calls.Add(1)
	if o.started != nil {
		select {
		case o.started <- struct{}{}:
		default:
		}
	}
	if o.release != nil {
		<-o.release
	}
	if o.delay > 0 {
		select {
		case <-time.After(o.delay): // the origin's own latency, not synchronisation
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
	}
	return o.value, nil
}

// downClient is a client for a port where nothing listens.
func downClient(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
