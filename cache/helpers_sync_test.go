package cache_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/faultproxy"
)

// Helpers shared by the behaviour tests: bounded waits on channels and
// conditions, computes held in flight, a client behind a fault proxy, a log
// that keeps its lines, versioned values, and the Redis key layout.

// valueKeyOf is the Redis name of the value key of key in namespace ns.
// It is the ONE place the tests spell the key layout
// ({ns:key}:v today): protocol v2 changes it here only.
func valueKeyOf(ns, key string) string { return "{" + ns + ":" + key + "}:v" }

// channelOf is the Redis channel a key's waiters subscribe to
// ({ns:key}:n today): the same caveat as [valueKeyOf].
func channelOf(ns, key string) string { return "{" + ns + ":" + key + "}:n" }

// within waits for ch to deliver, failing the test after d with what did
// not happen.
func within[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s did not happen within %s", what, d)
	}
	panic("unreachable")
}

// tryWithin is [within] that reports false instead of failing, so the test
// can release what blocks the sender and collect the result afterwards.
func tryWithin[T any](ch <-chan T, d time.Duration) (T, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-timer.C:
		var zero T
		return zero, false
	}
}

// async runs f in a goroutine and returns a channel that receives its
// result and how long it took.
func async[T any](f func() T) <-chan timed[T] {
	ch := make(chan timed[T], 1)
	go func() {
		start := time.Now()
		v := f()
		ch <- timed[T]{v: v, took: time.Since(start)}
	}()
	return ch
}

type timed[T any] struct {
	v    T
	took time.Duration
}

// valErr is a call's value and error.
type valErr[V any] struct {
	v   V
	err error
}

// held is a compute function that blocks until released (or the test
// ends), ignoring its context unless honourCtx: the "fn ignores its context"
// and "slow origin" of the issue. Release is idempotent and registered as a
// cleanup, so no goroutine outlives the test (the leak check).
type held[V any] struct {
	value     V
	err       error
	panicWith any
	honourCtx bool

	calls    chan struct{} // receives once per call (buffered)
	returned chan struct{} // receives once per return (buffered)
	once     sync.Once
	release  chan struct{}
}

func newHeld[V any](t testing.TB, value V) *held[V] {
	h := &held[V]{value: value, calls: make(chan struct{}, 1024), returned: make(chan struct{}, 1024), release: make(chan struct{})}
	t.Cleanup(h.Release)
	return h
}

// Release lets every call (past and future) return.
func (h *held[V]) Release() { h.once.Do(func() { close(h.release) }) }

func (h *held[V]) fn(ctx context.Context) (V, error) {
	h.calls <- struct{}{}
	defer func() { h.returned <- struct{}{} }()
	if h.honourCtx {
		select {
		case <-h.release:
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
	} else {
		<-h.release
	}
	if h.panicWith != nil {
		panic(h.panicWith)
	}
	return h.value, h.err
}

// batch adapts h to GetOrComputeMany: every key gets prefix+key.
func (h *held[V]) batch(prefix string) func(context.Context, []string) (map[string]string, error) {
	return func(ctx context.Context, keys []string) (map[string]string, error) {
		if _, err := h.fn(ctx); err != nil {
			return nil, err
		}
		m := map[string]string{}
		for _, k := range keys {
			m[k] = prefix + k
		}
		return m, nil
	}
}

// proxiedClient returns a client that reaches the package's Redis through a
// fault-injecting proxy, with go-redis' default context handling (as users
// run it: ContextTimeoutEnabled off) and readTimeout.
func proxiedClient(t testing.TB, readTimeout time.Duration) (*faultproxy.Proxy, *redis.Client) {
	t.Helper()
	p := newProxy(t)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: readTimeout,
		ReadTimeout: readTimeout, WriteTimeout: readTimeout})
	t.Cleanup(func() { _ = rdb.Close() })
	return p, rdb
}

// bounded returns a context that ends after d, cancelled at cleanup: every
// call of the tests has a bound.
func bounded(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lineLog is a slog handler that keeps every message.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *lineLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}
func (l *lineLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lineLog) WithGroup(string) slog.Handler      { return l }

func (l *lineLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// versioned is "v-<n>", the value of write n of the L1 tests.
func versioned(n int) string { return "v-" + strconv.Itoa(n) }

// versionOf parses versioned; ok is false for any other value.
func versionOf(s string) (int, bool) {
	rest, ok := strings.CutPrefix(s, "v-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

// eventually polls cond every 2ms until it holds, failing the test after
// timeout with why() (called then, so it can report the last state seen):
// for state that changes on its own (background work, Redis, the clock).
func eventually(t testing.TB, timeout time.Duration, cond func() bool, why func() string) {
	t.Helper()
	poll(t, timeout, 2*time.Millisecond, cond, why)
}

// clockPast waits until d has passed since from: for a TTL or cooldown of
// the library to run out (the clock is not injectable from outside the
// package).
func clockPast(t testing.TB, from time.Time, d time.Duration) {
	t.Helper()
	eventually(t, d+5*time.Second, func() bool { return time.Since(from) > d }, func() string { return "the clock did not advance" })
}

// waitGroupWithin waits for wg, failing the test after d with what did not
// happen.
func waitGroupWithin(t testing.TB, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	within(t, done, d, what)
}
