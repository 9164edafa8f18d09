package middleware_test

// Handler runs whose request left go on to fill the cache, detached; a
// route bounds how many do (Options.MaxDetachedRuns), so that clients that
// leave at once cannot keep more runs going than the route's own limits
// allow. Past the bound a leaving request's run is cancelled.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

func TestDetachedRunsAreBoundedPerRoute(t *testing.T) {
	const clients, bound = 6, 2
	release := make(chan struct{})
	var cancelled atomic.Int32
	cancelledCh := make(chan struct{}, clients)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
			fmt.Fprint(w, "done")
		case <-r.Context().Done():
			cancelled.Add(1)
			cancelledCh <- struct{}{}
		case <-time.After(parkBound):
		}
	})
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{MaxDetachedRuns: bound}, h)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/unique/%d", srv.URL, i), nil)
			req.Host = host
			if res, err := client.Do(req); err == nil {
				res.Body.Close()
				t.Errorf("request %d answered while its handler was parked", i)
			}
		})
	}
	leakcheck.WaitBlocked(t, "middleware_test.TestDetachedRunsAreBoundedPerRoute.func1(", clients, 30*time.Second)
	cancel() // every client leaves as soon as its run started
	waitAll(t, &wg, "the clients to leave")
	for range clients - bound {
		recv(t, cancelledCh, "a run past the bound to be cancelled")
	}
	waitFramesGone(t, "middleware.(*handler).ServeHTTP(")
	if n := cancelled.Load(); n != clients-bound {
		t.Fatalf("%d runs cancelled, want %d: %d detached runs went on", n, clients-bound, clients-n)
	}
	close(release)
	waitFramesGone(t, "middleware_test.TestDetachedRunsAreBoundedPerRoute.func1(")
	// A run's fill comes after its handler returned, on the goroutine of
	// its load: wait for those too (on a loaded machine the first request
	// below came before one fill, and ran the handler itself).
	waitFramesGone(t, "stampede/singleflight.Go[")
	// The runs that went on filled the cache.
	hits := 0
	for i := range clients {
		if r := get(t, fmt.Sprintf("%s/unique/%d", srv.URL, i), nil); r.header.Get("X-Cache") == "HIT" {
			hits++
		}
	}
	if hits != bound {
		t.Fatalf("%d entries stored by the detached runs, want %d", hits, bound)
	}
}

// A run that revalidates a kept response streams nothing to its request,
// yet that request leaving makes it detached all the same: it takes a slot
// or is cancelled.
func TestRevalidatingRunsAreBoundedToo(t *testing.T) {
	const clients, bound = 4, 1
	var park atomic.Bool
	release := make(chan struct{})
	cancelledCh := make(chan struct{}, clients)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "s-maxage=3600") // kept past its lifetime, to be revalidated
		w.Header().Set("ETag", `"v1"`)
		if !park.Load() {
			fmt.Fprint(w, "v1")
			return
		}
		if r.Header.Get("If-None-Match") != `"v1"` {
			t.Errorf("the run after the expiry is not a revalidation: If-None-Match %q", r.Header.Get("If-None-Match"))
		}
		select {
		case <-release:
			fmt.Fprint(w, "v2")
		case <-r.Context().Done():
			cancelledCh <- struct{}{}
		case <-time.After(parkBound):
		}
	})
	// ComputeTimeout past every wait of the test: only the bound cancels.
	c := newResponses(t, redistest.Client(t), cache.Options{ComputeTimeout: 4 * parkBound})
	srv := serve(t, c, middleware.Options{MaxDetachedRuns: bound}, h)
	for i := range clients {
		url := fmt.Sprintf("%s/u/%d", srv.URL, i)
		if r := get(t, url, nil); r.body != "v1" {
			t.Fatalf("fill %d: %q", i, r.body)
		}
		// Expired, kept: the next run revalidates it (If-None-Match).
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Host = host
		if err := c.Expire(t.Context(), middleware.Key(req, nil)); err != nil {
			t.Fatal(err)
		}
	}
	park.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/u/%d", srv.URL, i), nil)
			req.Host = host
			if res, err := client.Do(req); err == nil {
				res.Body.Close()
			}
		})
	}
	const frame = "middleware_test.TestRevalidatingRunsAreBoundedToo.func1("
	leakcheck.WaitBlocked(t, frame, clients, 30*time.Second)
	cancel() // every client leaves as soon as its run started
	waitAll(t, &wg, "the clients to leave")
	for range clients - bound {
		recv(t, cancelledCh, "a revalidating run past the bound to be cancelled")
	}
	close(release)
	waitFramesGone(t, frame)
	if n := len(cancelledCh); n != 0 {
		t.Fatalf("%d more runs cancelled than the bound leaves", n)
	}
}
