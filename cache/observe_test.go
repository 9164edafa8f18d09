package cache_test

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// events records what an Observer is told.
type events struct {
	mu sync.Mutex
	es []cache.Event
}

func (r *events) Observe(_ context.Context, e cache.Event) {
	r.mu.Lock()
	r.es = append(r.es, e)
	r.mu.Unlock()
}

func (r *events) count(kind cache.EventKind, match func(cache.Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.es {
		if e.Kind == kind && (match == nil || match(e)) {
			n++
		}
	}
	return n
}

func outcome(o cache.Outcome) func(cache.Event) bool {
	return func(e cache.Event) bool { return e.Outcome == o }
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestObserverSeesEveryEvent(t *testing.T) {
	ns := redistest.Prefix(t)
	obs := &events{}
	var logs syncBuf
	// The lease is extended every LeaseTTL/3 (200 ms) during the 400 ms
	// compute, and lost only to a 600 ms silence: a loaded machine that
	// delays one extension does not hand B the lease (it did at 90 ms).
	opts := cache.Options{Namespace: ns, Observer: obs, Logger: slog.New(slog.NewTextHandler(&logs, nil)), LeaseTTL: 600 * time.Millisecond}
	caches := replicas[string](t, 2, opts)
	ctx := context.Background()

	// A leads while B waits for it.
	slow := &origin[string]{value: "v", started: make(chan struct{}, 1), delay: 400 * time.Millisecond}
	done := make(chan struct{})
	go func() { defer close(done); _, _ = caches[0].Fetch(ctx, "k", slow.fn) }()
	<-slow.started
	if r, err := caches[1].Fetch(ctx, "k", slow.fn); err != nil || r.Outcome != cache.Waited {
		t.Fatalf("%+v %v", r, err)
	}
	<-done
	if _, err := caches[1].Fetch(ctx, "k", slow.fn); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what string
		n    int
		want func(int) bool
	}{
		{"lease acquired", obs.count(cache.EventLeaseAcquired, func(e cache.Event) bool { return e.Key == "k" && e.Namespace == ns }), eq(1)},
		{"lease busy", obs.count(cache.EventLeaseBusy, nil), atLeast(1)},
		{"lease extended", obs.count(cache.EventLeaseExtended, nil), atLeast(1)},
		{"compute", obs.count(cache.EventCompute, func(e cache.Event) bool { return e.Duration >= 400*time.Millisecond && e.Err == nil }), eq(1)},
		{"wait ended by another replica's value", obs.count(cache.EventWait, outcome(cache.Waited)), eq(1)},
		{"outcome miss", obs.count(cache.EventOutcome, outcome(cache.Miss)), eq(1)},
		{"outcome waited", obs.count(cache.EventOutcome, outcome(cache.Waited)), eq(1)},
		{"outcome hit", obs.count(cache.EventOutcome, outcome(cache.Hit)), eq(1)},
	}
	for _, c := range checks {
		if !c.want(c.n) {
			t.Errorf("%s: %d events", c.what, c.n)
		}
	}

	// A fill fenced out by a Delete, and a lease lost to a thief.
	held := &origin[string]{value: "late", started: make(chan struct{}, 1), release: make(chan struct{})}
	done = make(chan struct{})
	go func() { defer close(done); _, _ = caches[0].Fetch(ctx, "f", held.fn) }()
	<-held.started
	if err := caches[1].Delete(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	leaseKey, _ := lease.Keys(ns + ":f")
	if err := redistest.Client(t).Set(ctx, leaseKey, "thief", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lease loss", func() bool { return obs.count(cache.EventLeaseLost, nil) == 1 })
	close(held.release)
	<-done
	if n := obs.count(cache.EventFencedOut, func(e cache.Event) bool { return e.Key == "f" }); n != 1 {
		t.Errorf("fenced out: %d", n)
	}
	if n := obs.count(cache.EventReleaseRejected, nil); n != 1 {
		t.Errorf("release rejected: %d", n)
	}

	// A corrupt entry and a cached not-found.
	if err := redistest.Client(t).Set(ctx, "{"+ns+":bad}:v", "garbage", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, _ = caches[0].Fetch(ctx, "bad", func(context.Context) (string, error) { return "ok", nil })
	nf := func(context.Context) (string, error) { return "", cache.ErrNotFound }
	_, _ = caches[0].Fetch(ctx, "gone", nf)
	_, _ = caches[0].Fetch(ctx, "gone", nf)
	if n := obs.count(cache.EventCorrupt, nil); n != 1 {
		t.Errorf("corrupt: %d", n)
	}
	if n := obs.count(cache.EventOutcome, func(e cache.Event) bool { return e.Negative && e.Outcome == cache.Hit }); n != 1 {
		t.Errorf("negative hits: %d", n)
	}
	for _, msg := range []string{"corrupt or foreign entry", "fill rejected by the fence", "lease lost while computing"} {
		if !strings.Contains(logs.String(), msg) {
			t.Errorf("no log line %q in\n%s", msg, logs.String())
		}
	}
}

func TestObserverSeesBreaker(t *testing.T) {
	srv, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		redistest.Server(t)
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	obs := &events{}
	var logs syncBuf
	c := newCache[int](t, rdb, cache.Options{Observer: obs, Logger: slog.New(slog.NewTextHandler(&logs, nil)), BreakerThreshold: 1, BreakerCooldown: 10 * time.Millisecond})
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	_, _ = c.Fetch(ctx, "k", fn)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Fetch(ctx, "k", fn); r.Outcome != cache.Degraded {
		t.Fatalf("%+v", r)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the breaker to close", func() bool {
		_, _ = c.Fetch(ctx, "k", fn)
		return obs.count(cache.EventBreakerClosed, nil) == 1
	})
	if obs.count(cache.EventBreakerOpen, nil) != 1 || obs.count(cache.EventRedisError, nil) < 1 || obs.count(cache.EventOutcome, outcome(cache.Degraded)) < 1 {
		t.Fatalf("breaker events: open=%d errors=%d", obs.count(cache.EventBreakerOpen, nil), obs.count(cache.EventRedisError, nil))
	}
	for _, msg := range []string{"breaker open", "breaker closed"} {
		if !strings.Contains(logs.String(), msg) {
			t.Errorf("no log line %q", msg)
		}
	}
}

func TestEventKindNames(t *testing.T) {
	seen := map[string]bool{}
	for k := cache.EventOutcome; k <= cache.EventUnstored; k++ {
		name := k.String()
		if name == "unknown" || seen[name] {
			t.Fatalf("kind %d: %q", k, name)
		}
		seen[name] = true
	}
	if cache.EventKind(200).String() != "unknown" {
		t.Fatal("out of range kind")
	}
	var f cache.ObserverFunc = func(context.Context, cache.Event) {}
	f.Observe(context.Background(), cache.Event{})
}

// With no observer the hit path allocates no more than with one: events
// are values, built only when someone listens. Each figure is the least of
// five measurements: AllocsPerRun counts the whole process's allocations,
// and what other goroutines allocate meanwhile (a previous test's
// connections closing) only ever adds.
func TestObserverCostsNoAllocations(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	fn := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	allocs := func(obs cache.Observer) float64 {
		c := newCache[[]byte](t, rdb, cache.Options{Observer: obs})
		if _, err := c.GetOrCompute(ctx, "k", fn); err != nil {
			t.Fatal(err)
		}
		least := math.Inf(1)
		for range 5 {
			least = min(least, testing.AllocsPerRun(200, func() { _, _ = c.GetOrCompute(ctx, "k", fn) }))
		}
		return least
	}
	none := allocs(nil)
	var n int
	with := allocs(cache.ObserverFunc(func(context.Context, cache.Event) { n++ }))
	if with > none {
		t.Fatalf("an observer adds allocations: %.1f vs %.1f", with, none)
	}
	if n == 0 {
		t.Fatal("the observer saw nothing")
	}
}

func eq(n int) func(int) bool      { return func(got int) bool { return got == n } }
func atLeast(n int) func(int) bool { return func(got int) bool { return got >= n } }
