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
