package middleware_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// A run the purge overlapped whose compute function outlives the cache's
// ComputeTimeout after its handler returned (here: while its response, a
// marker and a tagged variant, is being stored) is abandoned by the cache,
// which answers the Fetch with ErrComputeTimeout and fences nothing (an
// error has no value to fence). The abandoned compute still records its
// response as the request's own, and respond answers own before it looks at
// the error: the purged run answers its request after the purge returned
// (robustness redis-busy-1796606618172213577: c2742, 246 ms of a 250 ms
// ComputeTimeout). The request must get the failure's answer, or a run
// begun after the purge, never run 1.
func TestPurgedRunAbandonedPastComputeTimeoutAnswersNothing(t *testing.T) {
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	timedOut, variantFailed := make(chan struct{}), make(chan struct{})
	var timedOutOnce, slowOnce, failedOnce sync.Once
	copts := cache.Options{TTL: time.Hour, ComputeTimeout: 2 * time.Second,
		// The cache's side of the abandoned compute: hold it (as a loaded
		// machine's scheduler may) until the abandoned run has recorded its
		// response as the request's own.
		Observer: cache.ObserverFunc(func(_ context.Context, e cache.Event) {
			if e.Kind != cache.EventCompute || !errors.Is(e.Err, cache.ErrComputeTimeout) {
				return
			}
			timedOutOnce.Do(func() { close(timedOut) })
			recv(t, variantFailed, "the abandoned run's variant to fail, just before it records its response")
		})}
	c := newResponses(t, redistest.Client(t), copts)
	opts := middleware.Options{CacheAuthorized: true, // every response varies: a marker and a variant
		// The abandoned run's variant fails to store (its context ended):
		// the run records its response as the request's own right after.
		Logger: slog.New(logSignal{msg: "response not stored", once: &failedOnce, ch: variantFailed}),
		// The variant's key is made after the handler returned, inside the
		// compute: a slow step there takes the compute past ComputeTimeout.
		Key: func(r *http.Request, vary []string) string {
			if len(vary) > 0 {
				slowOnce.Do(func() { recv(t, timedOut, "the cache to abandon the compute") })
			}
			return middleware.Key(r, vary)
		}}
	srv := serve(t, c, opts, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Surrogate-Key", "doc")
		if n == 1 {
			close(started)
			parked(release)
		}
		w.Write([]byte("run " + string(rune('0'+n))))
	}))
	replied := make(chan reply, 1)
	go func() { replied <- get(t, srv.URL+"/doc", nil) }()
	recv(t, started, "run 1 to start")
	if err := middleware.Purge(t.Context(), c, "doc"); err != nil {
		t.Fatal(err)
	}
	purged := time.Now()
	close(release) // run 1 returns, after the purge returned
	r := recv(t, replied, "the request's answer")
	t.Logf("answered %d %q (%s) %s after the purge returned; %d runs", r.status, r.body, r.header.Get("X-Cache"), time.Since(purged), runs.Load())
	if r.body == "run 1" {
		t.Fatalf("answered %d %q (X-Cache %s) by the run the purge overlapped, after the purge returned",
			r.status, r.body, r.header.Get("X-Cache"))
	}
}

// logSignal is a slog.Handler that closes ch once a record whose message
// contains msg is logged.
type logSignal struct {
	msg  string
	once *sync.Once
	ch   chan struct{}
}

func (l logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l logSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, l.msg) {
		l.once.Do(func() { close(l.ch) })
	}
	return nil
}
func (l logSignal) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logSignal) WithGroup(string) slog.Handler      { return l }
