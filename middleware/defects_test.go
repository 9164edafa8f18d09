package middleware_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chimiddleware "github.com/go-chi/chi/v5/middleware"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

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
			srv := httptest.NewServer(rt.mount(middleware.Cache(c), h))
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
				for found := false; !found; {
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

// Defect 2: a response that is not shareable (Set-Cookie, too large to
// store) reaches only the request whose handler run produced it, also
// when the URL's marker and the variant are fetched by different runs.
func TestNonShareableResponsesStayWithTheirRequest(t *testing.T) {
	cases := []struct {
		name       string
		clients    int
		body       int // bytes of padding
		maxValue   int // the cache's MaxValueBytes (0: NewCache's default)
		storedPage bool
	}{
		// The page is larger than the cache stores, but under MaxBodyBytes:
		// nothing is stored, every page goes to its own client.
		{"too-large-to-store/clients=2", 2, 8000, 4096, false},
		{"too-large-to-store/clients=60", 60, 8000, 4096, false},
		// Default options, a page of 1 MiB - 100 B (the case): the
		// cookie clients' page is stored and shared; a Set-Cookie page never.
		{"defaults/1MiB-100B", 6, 1<<20 - 100, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Each page names the client it was made for; cookie-less
			// clients get a session cookie naming them too.
			h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
				w.Header().Set("Vary", "Accept-Language")
				client := r.Header.Get("X-Client")
				if _, err := r.Cookie("session"); err != nil {
					http.SetCookie(w, &http.Cookie{Name: "session", Value: "for-" + client})
					client = "anonymous " + client
				}
				fmt.Fprintf(w, "page for %s|%s", client, strings.Repeat("x", tc.body))
			}}
			ns := redistest.Prefix(t)
			var urls []string
			for range 2 {
				c := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns, MaxValueBytes: tc.maxValue})
				urls = append(urls, serve(t, c, middleware.Options{}, h).URL)
			}
			for round := range 3 {
				var wg sync.WaitGroup
				for i := range tc.clients {
					wg.Go(func() {
						client := fmt.Sprintf("c%d-%d", round, i)
						hdr := map[string]string{"X-Client": client, "Accept-Language": "en"}
						own := "page for anonymous " + client + "|"
						if i%2 == 1 {
							hdr["Cookie"] = "session=mine"
							own = "page for " + client + "|"
						}
						r := get(t, urls[i%2]+fmt.Sprintf("/page?r=%d", round), hdr)
						switch {
						case strings.HasPrefix(r.body, own):
						case !tc.storedPage, strings.HasPrefix(r.body, "page for anonymous "):
							// Another client's page is a stored one, and never one
							// that came with a Set-Cookie.
							t.Errorf("%s got %.40q (%s)", client, r.body, r.header.Get("X-Cache"))
						}
						if sc := r.header.Get("Set-Cookie"); sc != "" && (hdr["Cookie"] != "" || !strings.Contains(sc, "for-"+client)) {
							t.Errorf("%s (cookie %q) got Set-Cookie %q", client, hdr["Cookie"], sc)
						}
					})
				}
				waitAll(t, &wg, "the round's clients to be answered")
			}
		})
	}
}

// Defect 2: a response too large to store is not handed to the requests
// that shared its handler run: each runs its own.
func TestTooLargeToStoreIsNotShared(t *testing.T) {
	h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, r *http.Request, n int32) {
		fmt.Fprintf(w, "for %s|%s", r.Header.Get("X-Client"), strings.Repeat("x", 8000))
	}}
	c := newResponses(t, redistest.Client(t), cache.Options{MaxValueBytes: 4096})
	srv := serve(t, c, middleware.Options{}, h)
	for i, r := range clientsOnOneRun(t, srv.URL+"/big", 10, h.release) {
		if !strings.HasPrefix(r.body, fmt.Sprintf("for %d|", i)) {
			t.Errorf("client %d got %.20q (%s)", i, r.body, r.header.Get("X-Cache"))
		}
	}
}

// Defect 3: a URL whose Vary list grows updates its marker; no panic.
func TestVaryListGrows(t *testing.T) {
	var grown atomic.Bool
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		if grown.Load() {
			w.Header().Set("Vary", "Accept-Language, Accept-Encoding")
		} else {
			w.Header().Set("Vary", "Accept-Language")
		}
		fmt.Fprintf(w, "%s/%s #%d", r.Header.Get("Accept-Language"), r.Header.Get("Accept-Encoding"), n)
	}}
	ns := redistest.Prefix(t)
	c := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns})
	srv := serve(t, c, middleware.Options{}, h)
	// (Go's client sends Accept-Encoding: gzip unless the request names one.)
	if r := get(t, srv.URL+"/v", map[string]string{"Accept-Language": "en", "Accept-Encoding": "identity"}); r.body != "en/identity #1" {
		t.Fatalf("first: %d %q", r.status, r.body)
	}
	grown.Store(true)
	steps := []struct {
		lang, enc, body, status string
	}{
		{"fr", "gzip", "fr/gzip #2", "MISS"},
		{"fr", "gzip", "fr/gzip #2", "HIT"},
		{"fr", "br", "fr/br #3", "MISS"},
		{"fr", "br", "fr/br #3", "HIT"},
		{"de", "gzip", "de/gzip #4", "MISS"},
		{"de", "gzip", "de/gzip #4", "HIT"},
	}
	for _, s := range steps {
		r := get(t, srv.URL+"/v", map[string]string{"Accept-Language": s.lang, "Accept-Encoding": s.enc})
		if r.status != http.StatusOK || r.body != s.body || r.header.Get("X-Cache") != s.status {
			t.Fatalf("%s/%s: %d %q %s, want %q %s", s.lang, s.enc, r.status, r.body, r.header.Get("X-Cache"), s.body, s.status)
		}
	}
	// The URL's marker names both headers now.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v", nil)
	req.Host = host
	marker, found, err := c.Get(context.Background(), middleware.Key(req, nil))
	if err != nil || !found || strings.Join(marker.VaryOn, ",") != "Accept-Encoding,Accept-Language" {
		t.Fatalf("marker %v found=%v err=%v", marker.VaryOn, found, err)
	}
}

// Defect 4: the shared run is a plain GET; each request's 304 or 206 is
// derived from the full response, and the run fills the cache.
func TestConditionalAndRangeRequestsShareAPlainRun(t *testing.T) {
	const body = "0123456789abcdefghij"
	var sawConditional atomic.Int32
	h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, r *http.Request, n int32) {
		for _, name := range []string{"If-None-Match", "If-Modified-Since", "Range", "If-Range", "If-Match"} {
			if r.Header.Get(name) != "" {
				sawConditional.Add(1)
			}
		}
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), strings.NewReader(body))
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	leaders := []map[string]string{
		{"If-None-Match": `"v1"`},
		{"Range": "bytes=0-3"},
		{"If-Modified-Since": "Fri, 02 Jan 2026 03:04:05 GMT"},
	}
	for _, leader := range leaders {
		t.Run(fmt.Sprint(leader), func(t *testing.T) {
			h.release = make(chan struct{})
			h.runs.Store(0)
			path := fmt.Sprintf("/c%d", len(leader)+len(fmt.Sprint(leader)))
			var first reply
			done := make(chan struct{})
			go func() { defer close(done); first = get(t, srv.URL+path, leader) }()
			leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 1, 10*time.Second)
			const joiners = 5
			replies := make([]reply, joiners)
			var wg sync.WaitGroup
			for i := range joiners {
				wg.Go(func() { replies[i] = get(t, srv.URL+path, nil) })
			}
			leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 1+joiners, 10*time.Second)
			close(h.release)
			waitAll(t, &wg, "the plain GETs to be answered")
			recv(t, done, "the leader to be answered")
			for i, r := range replies {
				if r.status != http.StatusOK || r.body != body {
					t.Errorf("plain GET %d: %d %q (%s)", i, r.status, r.body, r.header.Get("X-Cache"))
				}
			}
			switch {
			case leader["Range"] != "":
				if first.status != http.StatusPartialContent || first.body != "0123" || first.header.Get("Content-Range") != "bytes 0-3/20" {
					t.Errorf("range leader: %d %q %v", first.status, first.body, first.header)
				}
			default:
				if first.status != http.StatusNotModified || first.body != "" {
					t.Errorf("conditional leader: %d %q", first.status, first.body)
				}
			}
			if r := get(t, srv.URL+path, nil); r.header.Get("X-Cache") != "HIT" || r.body != body || h.runs.Load() != 1 {
				t.Errorf("after: %s %q, %d runs", r.header.Get("X-Cache"), r.body, h.runs.Load())
			}
		})
	}
	if n := sawConditional.Load(); n != 0 {
		t.Errorf("the shared run saw %d conditional headers", n)
	}
}

// Defect 5: a 103 Early Hints goes to the live client only; the final
// status and headers are stored, without the hint's Link.
func TestEarlyHintsPassThroughOnly(t *testing.T) {
	hinted := make(chan struct{})
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		if n == 1 {
			parked(hinted) // the client has the hint before the handler goes on
		}
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Final", "yes")
		fmt.Fprint(w, "final body")
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	first, hints := fetchWithHints(t, srv.URL+"/hints", func() { close(hinted) })
	if len(hints) != 1 || hints[0] != "103 </app.css>; rel=preload" {
		t.Fatalf("hints to the live client: %q", hints)
	}
	if first.status != http.StatusOK || first.body != "final body" || first.header.Get("X-Final") != "yes" || first.header.Get("Link") != "" {
		t.Fatalf("first: %d %q %v", first.status, first.body, first.header)
	}
	second, hints := fetchWithHints(t, srv.URL+"/hints", nil)
	if len(hints) != 0 || second.header.Get("X-Cache") != "HIT" || second.status != http.StatusOK ||
		second.body != "final body" || second.header.Get("X-Final") != "yes" || second.header.Get("Link") != "" {
		t.Fatalf("stored: hints %q, %d %q %v", hints, second.status, second.body, second.header)
	}
}

// Defect 8: a streaming handler can flush (http.Flusher and
// http.ResponseController); its response streams to its client as written
// and is not stored.
func TestFlushStreamsAndIsNotStored(t *testing.T) {
	read := make(chan struct{})
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		if _, ok := w.(http.Flusher); !ok {
			http.Error(w, "not a Flusher", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range 3 {
			fmt.Fprintf(w, "data: run %d tick %d\n\n", n, i)
			if err := rc.Flush(); err != nil {
				panic(err)
			}
			// Streaming, the writer unwraps to the client's: a long stream
			// can lift the server's write deadline.
			if err := rc.SetWriteDeadline(time.Time{}); err != nil {
				panic(err)
			}
			select {
			case <-read: // the client read this tick before the next one is written
			case <-r.Context().Done():
				return
			}
		}
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	for run := 1; run <= 2; run++ {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/events", nil)
		req.Host = host
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK || res.Header.Get("X-Cache") != "MISS" {
			t.Fatalf("run %d: %d %s", run, res.StatusCode, res.Header.Get("X-Cache"))
		}
		br := bufio.NewReader(res.Body)
		for i := range 3 {
			line, err := br.ReadString('\n')
			if err != nil || line != fmt.Sprintf("data: run %d tick %d\n", run, i) {
				t.Fatalf("run %d tick %d: %q %v", run, i, line, err)
			}
			_, _ = br.ReadString('\n')
			send(t, read, struct{}{}, "the handler to take the client's read")
		}
		if rest, _ := io.ReadAll(br); len(rest) != 0 {
			t.Fatalf("trailing %q", rest)
		}
		res.Body.Close()
	}
}

// Defect 9: with default options a body of MaxBodyBytes, and just below,
// is stored.
func TestBodyOfMaxBodyBytesIsStored(t *testing.T) {
	for _, size := range []int{1 << 20, 1<<20 - 16, 1<<20 - 100} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
				_, _ = w.Write([]byte(strings.Repeat("y", size)))
			}}
			srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
			get(t, srv.URL+"/max", nil)
			if r := get(t, srv.URL+"/max", nil); r.header.Get("X-Cache") != "HIT" || len(r.body) != size {
				t.Fatalf("%s, %d bytes", r.header.Get("X-Cache"), len(r.body))
			}
		})
	}
}

// Defect 10: HEAD with chi, as docs/http.md says to write it: chi's GetHead
// routes HEAD to the GET route, where the middleware answers it from the
// GET entry.
func TestHeadWithChi(t *testing.T) {
	h := &reports{param: func(r *http.Request) string { return chi.URLParam(r, "id") }}
	c := newResponses(t, redistest.Client(t), cache.Options{})
	r := chi.NewRouter()
	r.Use(chimiddleware.GetHead)
	r.With(middleware.Cache(c)).Get("/reports/{id}", h.ServeHTTP)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	const want = `{"report":"7","run":1}`
	head := do(t, http.MethodHead, srv.URL+"/reports/7", nil)
	if head.status != http.StatusOK || head.body != "" || head.header.Get("X-Cache") != "MISS" || head.header.Get("Content-Length") != fmt.Sprint(len(want)) {
		t.Fatalf("HEAD miss: %d %q %v", head.status, head.body, head.header)
	}
	if g := get(t, srv.URL+"/reports/7", nil); g.header.Get("X-Cache") != "HIT" || g.body != want {
		t.Fatalf("GET after HEAD: %s %q", g.header.Get("X-Cache"), g.body)
	}
	if head := do(t, http.MethodHead, srv.URL+"/reports/7", nil); head.status != http.StatusOK || head.header.Get("X-Cache") != "HIT" || head.body != "" {
		t.Fatalf("HEAD hit: %d %v", head.status, head.header)
	}
	if h.runs.Load() != 1 {
		t.Fatalf("%d runs", h.runs.Load())
	}
	// Without GetHead, chi answers HEAD on a GET route with 405 before any
	// middleware of the route runs: that is why docs/http.md says to add it.
	bare := chi.NewRouter()
	bare.With(middleware.Cache(c)).Get("/reports/{id}", h.ServeHTTP)
	srv2 := httptest.NewServer(bare)
	t.Cleanup(srv2.Close)
	if r := do(t, http.MethodHead, srv2.URL+"/reports/7", nil); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("HEAD without GetHead: %d", r.status)
	}
}

// A response that must stream (here: over MaxBodyBytes) when its client
// has left has nowhere to go: the handler's writes fail and nothing (no
// prefix) is stored.
func TestStreamWithoutClientStoresNothing(t *testing.T) {
	big := strings.Repeat("0123456789", 10_000)
	var failed atomic.Int32
	h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, r *http.Request, n int32) {
		for i := 0; i < len(big); i += 1000 {
			if _, err := io.WriteString(w, big[i:i+1000]); err != nil {
				failed.Add(1)
				return
			}
		}
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{MaxBodyBytes: 4096}, h)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/big", nil)
	req.Host = host
	done := make(chan struct{})
	go func() {
		defer close(done)
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 1, 10*time.Second)
	cancel() // the client leaves before the handler writes
	recv(t, done, "the cancelled request to return")
	waitFramesGone(t, "middleware.(*handler).ServeHTTP(")
	close(h.release)
	waitFramesGone(t, "middleware_test.(*counting).ServeHTTP(")
	// The cache's load of that run ends after the handler does (it releases
	// the lease): a request joining it would share its unshareable outcome.
	waitFramesGone(t, "singleflight.(*Group).doCall(")
	if failed.Load() != 1 {
		t.Fatalf("the handler's writes did not fail: %d", failed.Load())
	}
	if r := get(t, srv.URL+"/big", nil); r.header.Get("X-Cache") != "MISS" || r.body != big {
		t.Fatalf("after: %s, %d bytes", r.header.Get("X-Cache"), len(r.body))
	}
}

// fetchWithHints GETs url, calling onHint on each 1xx, and returns the
// reply and the 1xx responses seen ("code Link").
func fetchWithHints(t *testing.T, url string, onHint func()) (reply, []string) {
	t.Helper()
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
		hints = append(hints, fmt.Sprint(code, " ", header.Get("Link")))
		if onHint != nil {
			onHint()
		}
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, url, nil)
	req.Host = host
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{status: res.StatusCode, header: res.Header, body: string(b)}, hints
}

// 1xx responses go to the client whose request runs the handler, not to the
// requests that share the run.
func TestEarlyHintsNotToJoiners(t *testing.T) {
	h := &counting{release: make(chan struct{})}
	h.write = func(w http.ResponseWriter, r *http.Request, n int32) {
		fmt.Fprint(w, "final")
	}
	hinting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		h.ServeHTTP(w, r) // parks until released
	})
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, hinting)
	hinted := make(chan struct{})
	var leader reply
	var leaderHints []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		leader, leaderHints = fetchWithHints(t, srv.URL+"/j", func() { close(hinted) })
	}()
	recv(t, hinted, "the leader's hint")
	joined := make(chan struct{})
	var joiner reply
	var joinerHints []string
	go func() {
		defer close(joined)
		joiner, joinerHints = fetchWithHints(t, srv.URL+"/j", nil)
	}()
	leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 2, 10*time.Second)
	close(h.release)
	recv(t, done, "the leader to be answered")
	recv(t, joined, "the joiner to be answered")
	if len(leaderHints) != 1 || leader.header.Get("X-Cache") != "MISS" || leader.body != "final" {
		t.Fatalf("leader: %q %s %q", leaderHints, leader.header.Get("X-Cache"), leader.body)
	}
	if len(joinerHints) != 0 || joiner.header.Get("X-Cache") != "SHARED" || joiner.body != "final" || joiner.header.Get("Link") != "" {
		t.Fatalf("joiner: %q %s %q %v", joinerHints, joiner.header.Get("X-Cache"), joiner.body, joiner.header)
	}
}
