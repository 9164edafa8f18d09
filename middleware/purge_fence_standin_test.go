package middleware_test

// The purge fence against a stored response standing in for a run: a
// purged response answers neither a failure (stale-if-error) nor a run
// slower than SoftTimeout; and where the fence stops, a tagged failure is
// still shared among the requests of its run.

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// stale-if-error: a purged response does not stand in for a failing run,
// neither for the run the purge overlapped nor for one after it.
func TestPurgedResponseDoesNotStandInForAFailure(t *testing.T) {
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	opts := middleware.Options{TTL: time.Millisecond, StaleIfError: time.Hour} // a 5xx is answered stale
	fleet := fenceFleet(t, 2, false, cache.Options{TTL: time.Hour}, opts, func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if n == 1 {
			w.Header().Set("Surrogate-Key", "doc")
			fmt.Fprint(w, "run 1")
			return
		}
		if n == 2 {
			close(started)
			parked(release)
		}
		http.Error(w, fmt.Sprintf("run %d failed", n), http.StatusInternalServerError)
	})
	a, b := fleet[0], fleet[1]
	get(t, a.url+"/doc", nil)
	answer := make(chan reply, 1)
	go func() { answer <- expired(t, a.url+"/doc", nil) }()
	recv(t, started, "the failing run the purge overlaps to start")
	if err := middleware.Purge(t.Context(), b.c, "doc"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if got := recv(t, answer, "the request"); got.body == "run 1" || got.status != http.StatusInternalServerError {
		t.Fatalf("the request whose run failed: %d %q (%s), want the 500", got.status, got.body, got.header.Get("X-Cache"))
	}
	for i, rep := range fleet {
		if got := get(t, rep.url+"/doc", nil); got.body == "run 1" {
			t.Errorf("replica %d after the purge: %d %q (%s)", i, got.status, got.body, got.header.Get("X-Cache"))
		}
	}
}

// SoftTimeout: a run slower than the cache's SoftTimeout is answered by the
// stored response in its place, unless a purge reached that response
// meanwhile; then the request waits for the run (here until it fails past
// ComputeTimeout), and the purged response answers nothing.
func TestPurgedResponseDoesNotStandInForASlowRun(t *testing.T) {
	const soft = time.Second
	var runs atomic.Int32
	started := make(chan time.Time, 1)
	hang := make(chan struct{}) // the slow run outlives ComputeTimeout
	t.Cleanup(func() { close(hang) })
	copts := cache.Options{TTL: time.Hour, SoftTimeout: soft, ComputeTimeout: 2 * soft}
	opts := middleware.Options{TTL: time.Millisecond, StaleIfError: time.Hour} // may stand in
	fleet := fenceFleet(t, 2, false, copts, opts, func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Surrogate-Key", "doc")
		if n == 2 {
			started <- time.Now()
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
		fmt.Fprintf(w, "run %d", n)
	})
	a, b := fleet[0], fleet[1]
	get(t, a.url+"/doc", nil)
	answer := make(chan reply, 1)
	go func() { answer <- expired(t, a.url+"/doc", nil) }()
	began := recv(t, started, "the slow run to start")
	if err := middleware.Purge(t.Context(), b.c, "doc"); err != nil {
		t.Fatal(err)
	}
	purged := time.Since(began)
	got := recv(t, answer, "the request")
	if purged >= soft/2 {
		t.Skipf("the purge took %s, too close to SoftTimeout (%s) to tell which came first", purged, soft)
	}
	if got.body == "run 1" {
		t.Fatalf("the purged response stood in for the slow run: %d %q (%s)", got.status, got.body, got.header.Get("X-Cache"))
	}
}

// The price of the rule above stops at failures: a tagged 5xx (a handler
// that set its keys and then failed) still answers every request sharing
// its run, so a failing origin is called once, not once per request.
func TestTaggedFailureIsStillShared(t *testing.T) {
	h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, _ *http.Request, n int32) {
		w.Header().Set("Surrogate-Key", "doc")
		http.Error(w, fmt.Sprintf("run %d failed", n), http.StatusInternalServerError)
	}}
	c := newResponses(t, redistest.Client(t), cache.Options{TTL: time.Hour})
	srv := serve(t, c, middleware.Options{}, h)
	for _, r := range clientsOnOneRun(t, srv.URL+"/doc", 5, h.release) {
		if r.status != http.StatusInternalServerError || r.body != "run 1 failed\n" {
			t.Errorf("%d %q (%s), want the one run's 500", r.status, r.body, r.header.Get("X-Cache"))
		}
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("%d handler runs for one failing route, want 1", n)
	}
}
