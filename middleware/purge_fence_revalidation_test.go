package middleware_test

// The purge fence against a revalidation the purge overlaps, on the
// request's path and in a background refresh: the purged entry is never
// revalidated back, and a run the purge overlapped answers nothing, even
// when the run after it fails. The other paths are in purge_fence_test.go.

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/middleware"
)

// etagDoc is a route tagged "doc" with ETag "v1" whose conditional runs
// answer 304; the first of them signals started and parks until release.
func etagDoc(full, conditional *atomic.Int32, started chan<- struct{}, release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"v1"` {
			if conditional.Add(1) == 1 {
				close(started)
				parked(release)
			}
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Surrogate-Key", "doc")
		fmt.Fprintf(w, "full run %d", full.Add(1))
	}
}

// A request-path revalidation the purge overlaps is refused by the fence
// even when its handler answers 304; the run that replaces it is a plain
// GET, as after any purge: the purged entry is not revalidated, so a 304
// (a handler whose validators do not see what the purge was for) cannot
// re-arm the purged body.
func TestPurgedEntryIsNotRevalidatedByTheRunAfterThePurge(t *testing.T) {
	var full, conditional atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	// Fresh for a millisecond, then kept an hour for revalidation and never
	// served stale: the request after that revalidates on its own path.
	opts := middleware.Options{TTL: time.Millisecond, StaleIfError: time.Hour}
	fleet := fenceFleet(t, 2, false, cache.Options{TTL: time.Hour}, opts, etagDoc(&full, &conditional, started, release))
	a, b := fleet[0], fleet[1]
	if got := get(t, a.url+"/doc", nil); got.body != "full run 1" {
		t.Fatalf("first: %q", got.body)
	}
	revalidated := make(chan reply, 1)
	go func() { revalidated <- expired(t, a.url+"/doc", nil) }()
	recv(t, started, "the revalidation the purge overlaps to start")
	if err := middleware.Purge(t.Context(), b.c, "doc"); err != nil {
		t.Fatal(err)
	}
	close(release) // the overlapped revalidation answers 304 only now
	got := recv(t, revalidated, "the revalidating request")
	if got.status != http.StatusOK || got.body == "full run 1" {
		t.Fatalf("the revalidating request: %d %q (%s, %d conditional runs), want a full run after the purge", got.status, got.body, got.header.Get("X-Cache"), conditional.Load())
	}
	for i, rep := range fleet {
		if got := get(t, rep.url+"/doc", nil); got.body == "full run 1" {
			t.Errorf("replica %d served the purged body (%s)", i, got.header.Get("X-Cache"))
		}
	}
}

// A background refresh (stale-while-revalidate) the purge overlaps, whose
// handler answers 304, is refused, and the run after it is a plain GET: a
// request after the purge, waiting on the refresh's lease on another
// replica, is answered by a full run, never by the purged body re-armed.
func TestPurgedEntryIsNotRevalidatedByABackgroundRefresh(t *testing.T) {
	var full, conditional atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	opts := middleware.Options{TTL: time.Millisecond, Stale: time.Hour} // served stale, refreshed in the background
	fleet := fenceFleet(t, 2, false, cache.Options{TTL: time.Hour}, opts, etagDoc(&full, &conditional, started, release))
	a, b := fleet[0], fleet[1]
	if got := get(t, a.url+"/doc", nil); got.body != "full run 1" {
		t.Fatalf("first: %q", got.body)
	}
	if got := expired(t, a.url+"/doc", nil); got.header.Get("X-Cache") != middleware.StatusStale {
		t.Fatalf("past its lifetime: %s %q, want STALE", got.header.Get("X-Cache"), got.body)
	}
	recv(t, started, "the background refresh the purge overlaps to start")
	if err := middleware.Purge(t.Context(), b.c, "doc"); err != nil {
		t.Fatal(err)
	}
	after := make(chan reply, 1)
	go func() { after <- get(t, b.url+"/doc", nil) }()
	leakcheck.WaitBlocked(t, "cache.(*Cache[...]).wait(", 1, waitBound) // on the refresh's lease
	close(release)
	if got := recv(t, after, "the request after the purge"); got.status != http.StatusOK || got.body == "full run 1" {
		t.Fatalf("a request after the purge: %d %q (%s, %d conditional runs), want a full run after the purge", got.status, got.body, got.header.Get("X-Cache"), conditional.Load())
	}
	waitFramesGone(t, backgroundFrame)
	for i, rep := range fleet {
		if got := get(t, rep.url+"/doc", nil); got.body == "full run 1" {
			t.Errorf("replica %d served the purged body (%s)", i, got.header.Get("X-Cache"))
		}
	}
}

// A request whose run was purged while it ran, and whose next run then
// failed (here past the cache's ComputeTimeout), is not answered by the
// purged run: what a request's own run produced answers it only when that
// run is the one the cache's answer came from.
func TestPurgedRunDoesNotAnswerWhenTheRunAfterItFails(t *testing.T) {
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	hang := make(chan struct{}) // the second run outlives the compute's deadline
	t.Cleanup(func() { close(hang) })
	copts := cache.Options{TTL: time.Hour, ComputeTimeout: 2 * time.Second}
	fleet := fenceFleet(t, 2, false, copts, middleware.Options{}, func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Surrogate-Key", "doc")
		w.Header().Set("X-Run", fmt.Sprint(n))
		switch n {
		case 1:
			close(started)
			parked(release)
		case 2:
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
		fmt.Fprintf(w, "run %d", n)
	})
	a, b := fleet[0], fleet[1]
	answer := make(chan reply, 1)
	go func() { answer <- get(t, a.url+"/doc", nil) }()
	recv(t, started, "the run the purge overlaps to start")
	if err := middleware.Purge(t.Context(), b.c, "doc"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if got := recv(t, answer, "the request"); got.header.Get("X-Run") == "1" || got.body == "run 1" {
		t.Fatalf("answered by its purged run: %d %q (%s)", got.status, got.body, got.header.Get("X-Cache"))
	}
}
