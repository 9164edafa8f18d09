package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// A handler run that outlives its request (its client left, or it refreshes a
// stale entry in the background) sees exactly the routing state of the request
// that triggered it, with chi and ServeMux. Two helpers here serve other
// files too: reports (head_test.go) and waitFramesGone (streaming_test.go).

// reports answers /reports/{id} with the id its router handed it. While a
// gate is set, every run parks in park before it reads its route
// parameters, so a test can let the request that triggered it end first.
type reports struct {
	param func(r *http.Request) string
	gate  atomic.Pointer[chan struct{}]
	runs  atomic.Int32
	cc    string // Cache-Control of the responses
}

func (h *reports) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.runs.Add(1)
	if g := h.gate.Load(); g != nil {
		h.park(*g)
	}
	if h.cc != "" {
		w.Header().Set("Cache-Control", h.cc)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"report":%q,"run":%d}`, h.param(r), n)
}

//go:noinline
func (h *reports) park(gate chan struct{}) { parked(gate) }

const parkFrame = "middleware_test.(*reports).park("

// routers mount the middleware on /reports/{id} as users do, next to an
// uncached route /other/{x} whose requests recycle chi's route contexts.
var routers = map[string]struct {
	param func(r *http.Request) string
	mount func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler
}{
	"chi": {
		param: func(r *http.Request) string { return chi.URLParam(r, "id") },
		mount: func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.With(mw).Get("/reports/{id}", h.ServeHTTP)
			r.Get("/other/{x}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, chi.URLParam(r, "x")) })
			return r
		},
	},
	"chi-use": { // on the router: the run routes on its own copy of the route context
		param: func(r *http.Request) string { return chi.URLParam(r, "id") },
		mount: func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Get("/reports/{id}", h.ServeHTTP)
			r.Get("/other/{x}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, chi.URLParam(r, "x")) })
			return r
		},
	},
	"servemux": {
		param: func(r *http.Request) string { return r.PathValue("id") },
		mount: func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("GET /reports/{id}", mw(h))
			mux.HandleFunc("GET /other/{x}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.PathValue("x")) })
			return mux
		},
	},
}

// waitFramesGone waits until no goroutine has frame in its stack.
func waitFramesGone(t *testing.T, frame string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for leakcheck.CountFrames(frame) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines still in %q", frame)
		}
		time.Sleep(time.Millisecond) // goroutines ending is not observable by event: poll
	}
}

// backgroundFrame is in the stack of the cache's background work (a
// refresh) from the moment its goroutine exists until it ends.
const backgroundFrame = "cache.(*Cache[...]).goBackground"

// churn sends n concurrent requests to the uncached route, so that the
// router hands the route contexts of finished requests to new ones.
func churn(t *testing.T, base string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { get(t, fmt.Sprintf("%s/other/x%d", base, i), nil) })
	}
	waitAll(t, &wg, "the uncached route to answer")
}

// storedBody reads the stored response of a URL from Redis through a
// replica of its own.
func storedBody(t *testing.T, c *cache.Cache[middleware.Response], url string) (string, bool) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Host = host
	v, found, err := c.Get(context.Background(), middleware.Key(req, nil))
	if err != nil {
		t.Fatal(err)
	}
	return string(v.Body), found
}

// Defect 1: the handler run that outlives its request (its client left,
// or it refreshes a stale entry in the background) sees exactly the
// routing state of the request that triggered it, with chi and ServeMux.
func TestRouteParamsOfDetachedRuns(t *testing.T) {
	const n = 40
	for name, rt := range routers {
		t.Run(name+"/client-disconnect", func(t *testing.T) {
			ns := redistest.Prefix(t)
			h := &reports{param: rt.param}
			gate := make(chan struct{})
			h.gate.Store(&gate)
			c := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns})
			// Every run goes on detached: the route allows them all.
			srv := httptest.NewServer(rt.mount(middleware.CacheWithOptions(c, middleware.Options{MaxDetachedRuns: n}), h))
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/reports/%d", srv.URL, i), nil)
					req.Host = host
					if res, err := client.Do(req); err == nil {
						res.Body.Close()
						t.Errorf("request %d answered while its handler was parked", i)
					}
				})
			}
			leakcheck.WaitBlocked(t, parkFrame, n, 30*time.Second)
			cancel() // every client leaves, like curl -m 0.05
			waitAll(t, &wg, "the clients to leave")
			waitFramesGone(t, "middleware.(*handler).ServeHTTP(")
			churn(t, srv.URL, n)
			close(gate)
			waitFramesGone(t, parkFrame)
			replica := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns})
			for i := range n {
				want := fmt.Sprintf(`{"report":"%d","run":`, i)
				var body string
				deadline := time.Now().Add(waitBound)
				for found := false; !found; {
					if time.Now().After(deadline) {
						t.Fatalf("/reports/%d not stored within %s", i, waitBound)
					}
					body, found = storedBody(t, replica, fmt.Sprintf("%s/reports/%d", srv.URL, i))
					time.Sleep(time.Millisecond) // the abandoned run stores in the background: poll
				}
				if !strings.HasPrefix(body, want) {
					t.Errorf("/reports/%d stored %s", i, body)
				}
				if r := get(t, fmt.Sprintf("%s/reports/%d", srv.URL, i), nil); r.header.Get("X-Cache") != "HIT" || r.body != body {
					t.Errorf("/reports/%d served %s %s", i, r.header.Get("X-Cache"), r.body)
				}
			}
		})
		t.Run(name+"/stale-refresh", func(t *testing.T) {
			ns := redistest.Prefix(t)
			h := &reports{param: rt.param}
			c := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns})
			// Fresh for 1ms, then stale for an hour: the next request
			// refreshes in the background.
			srv := httptest.NewServer(rt.mount(middleware.CacheWithOptions(c, middleware.Options{TTL: time.Millisecond, Stale: time.Hour}), h))
			t.Cleanup(srv.Close)
			for i := range n {
				get(t, fmt.Sprintf("%s/reports/%d", srv.URL, i), nil)
			}
			gate := make(chan struct{})
			h.gate.Store(&gate)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					url := fmt.Sprintf("%s/reports/%d", srv.URL, i)
					for {
						r := get(t, url, nil)
						if r.header.Get("X-Cache") == "STALE" {
							if !strings.HasPrefix(r.body, fmt.Sprintf(`{"report":"%d",`, i)) {
								t.Errorf("%s served %s", url, r.body)
							}
							return
						}
					}
				})
			}
			waitAll(t, &wg, "every URL to be answered stale")
			leakcheck.WaitBlocked(t, parkFrame, n, 30*time.Second)
			waitFramesGone(t, "middleware.(*handler).ServeHTTP(")
			churn(t, srv.URL, n)
			h.gate.Store(nil)
			close(gate)
			waitFramesGone(t, parkFrame)
			waitFramesGone(t, backgroundFrame)
			replica := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns})
			for i := range n {
				body, found := storedBody(t, replica, fmt.Sprintf("%s/reports/%d", srv.URL, i))
				if !found || !strings.HasPrefix(body, fmt.Sprintf(`{"report":"%d",`, i)) {
					t.Errorf("/reports/%d refreshed to %q", i, body)
				}
			}
			if runs := h.runs.Load(); runs != 2*n {
				t.Errorf("%d handler runs, want %d fills and %d refreshes", runs, n, n)
			}
		})
		t.Run(name+"/storm-on-replicas", func(t *testing.T) {
			ns := redistest.Prefix(t)
			h := &reports{param: rt.param}
			var urls []string
			for range 3 {
				c := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns})
				srv := httptest.NewServer(rt.mount(middleware.Cache(c), h))
				t.Cleanup(srv.Close)
				urls = append(urls, srv.URL)
			}
			var wg sync.WaitGroup
			for i := range 5 * n {
				wg.Go(func() {
					id := i % n
					r := get(t, fmt.Sprintf("%s/reports/%d", urls[i%3], id), nil)
					if !strings.HasPrefix(r.body, fmt.Sprintf(`{"report":"%d",`, id)) {
						t.Errorf("/reports/%d answered %s (%s)", id, r.body, r.header.Get("X-Cache"))
					}
				})
			}
			waitAll(t, &wg, "the storm to be answered")
		})
	}
}
