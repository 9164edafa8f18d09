package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// fleetReplica is one replica of a fleet: its own go-redis client, cache,
// middleware, chi router and server, with the purge handler mounted.
type fleetReplica struct {
	c   *cache.Cache[middleware.Response]
	url string
}

// registerPurge makes PURGE a method chi routes (it answers 405 for
// methods it does not know); call it before building a router.
var registerPurge = sync.OnceFunc(func() { chi.RegisterMethod(middleware.MethodPurge) })

// tagFleet starts n replicas sharing one Redis namespace; routes mounts
// the application's cached routes on each replica's router.
func tagFleet(t *testing.T, n int, opts middleware.Options, routes func(r chi.Router)) []fleetReplica {
	t.Helper()
	registerPurge()
	ns := redistest.Prefix(t)
	var fleet []fleetReplica
	for range n {
		c := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns, TTL: time.Hour})
		r := chi.NewRouter()
		r.Group(func(r chi.Router) {
			r.Use(middleware.CacheWithOptions(c, opts))
			routes(r)
		})
		r.Handle("/purge", middleware.PurgeHandler(c))
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		fleet = append(fleet, fleetReplica{c: c, url: srv.URL})
	}
	return fleet
}

// purgeReq sends a purge request to a replica's purge handler.
func purgeReq(t *testing.T, url, method string, hdr map[string]string, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url+"/purge", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return sendRequest(t, req, hdr)
}

// assertNoTagHeaders fails when a reply carries a tag header.
func assertNoTagHeaders(t *testing.T, rep reply, what string) {
	t.Helper()
	for _, name := range []string{"Surrogate-Key", "Cache-Tag"} {
		if v, ok := rep.header[name]; ok {
			t.Errorf("%s: %s reached the client: %q", what, name, v)
		}
	}
}

// A response tagged on replica A (by header or by Tag) is a HIT on every
// replica; a purge of its key on replica B makes every replica answer a
// new handler run; responses with other keys stay HITs.
func TestSurrogateKeyPurgedOnOneReplicaMissesOnAll(t *testing.T) {
	var runs atomic.Int32
	fleet := tagFleet(t, 3, middleware.Options{}, func(r chi.Router) {
		r.Get("/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
			id := chi.URLParam(r, "id")
			w.Header().Set("Surrogate-Key", "report-"+id+" reports")
			w.Header().Set("Cache-Tag", "owner-"+id)
			fmt.Fprintf(w, "report %s run %d", id, runs.Add(1))
		})
		r.Get("/code/{id}", func(w http.ResponseWriter, r *http.Request) {
			id := chi.URLParam(r, "id")
			if err := middleware.Tag(r.Context(), "code-"+id, "café"); err != nil {
				t.Error(err)
			}
			fmt.Fprintf(w, "code %s run %d", id, runs.Add(1))
		})
	})
	a, b := fleet[0], fleet[1]
	// warm tags every route on replica A; every replica then hits it.
	warm := func(path string) string {
		t.Helper()
		first := get(t, a.url+path, nil)
		if first.header.Get("X-Cache") != middleware.StatusMiss {
			t.Fatalf("%s on A: %s, want MISS", path, first.header.Get("X-Cache"))
		}
		for i, rep := range fleet {
			got := get(t, rep.url+path, nil)
			if got.header.Get("X-Cache") != middleware.StatusHit || got.body != first.body {
				t.Fatalf("%s on replica %d: %s %q, want HIT %q", path, i, got.header.Get("X-Cache"), got.body, first.body)
			}
			assertNoTagHeaders(t, got, path)
		}
		assertNoTagHeaders(t, first, path)
		return first.body
	}
	for _, tc := range []struct {
		name, path, other string
		purge             func(t *testing.T)
	}{
		{name: "Surrogate-Key header, PURGE", path: "/reports/1", other: "/reports/2", purge: func(t *testing.T) {
			if rep := purgeReq(t, b.url, "PURGE", map[string]string{"Surrogate-Key": "report-1"}, ""); rep.status != http.StatusOK {
				t.Fatalf("purge: %d %s", rep.status, rep.body)
			}
		}},
		{name: "Cache-Tag header, POST JSON", path: "/reports/3", other: "/reports/4", purge: func(t *testing.T) {
			rep := purgeReq(t, b.url, http.MethodPost, map[string]string{"Content-Type": "application/json"}, `{"tags": ["owner-3"]}`)
			if rep.status != http.StatusOK || !strings.Contains(rep.body, "owner-3") {
				t.Fatalf("purge: %d %s", rep.status, rep.body)
			}
		}},
		{name: "Tag, Purge", path: "/code/5", other: "/code/6", purge: func(t *testing.T) {
			if err := middleware.Purge(t.Context(), b.c, "code-5"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "non-ASCII key purged by header", path: "/code/7", other: "/reports/8", purge: func(t *testing.T) {
			if rep := purgeReq(t, b.url, "PURGE", map[string]string{"Surrogate-Key": "café"}, ""); rep.status != http.StatusOK {
				t.Fatalf("purge: %d %s", rep.status, rep.body)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := warm(tc.path)
			otherBody := warm(tc.other)
			tc.purge(t)
			for i, rep := range fleet {
				got := get(t, rep.url+tc.path, nil)
				if got.body == old {
					t.Errorf("replica %d answered the purged response %q (%s)", i, old, got.header.Get("X-Cache"))
				}
				if i == 0 && got.header.Get("X-Cache") != middleware.StatusMiss {
					t.Errorf("replica 0 after the purge: %s, want MISS", got.header.Get("X-Cache"))
				}
				if other := get(t, rep.url+tc.other, nil); other.body != otherBody || other.header.Get("X-Cache") != middleware.StatusHit {
					t.Errorf("replica %d: %s not purged, got %s %q, want HIT %q", i, tc.other, other.header.Get("X-Cache"), other.body, otherBody)
				}
			}
		})
	}
}

// The fence: a handler run that is still running while a purge of its key
// runs and returns is neither stored nor served, to its own request or
// anyone after; its request is answered by a new run. The response varies
// or not, or varies on more than its marker said (a variant is stored by a
// compute of its own, after the run; so is the longer marker).
func TestPurgeDuringRunningHandlerNeitherStoresNorServesIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vary    func(n int32) string // the Vary of run n
		blocked int32                // the run the purge overlaps
	}{
		{name: "no vary", vary: func(int32) string { return "" }, blocked: 1},
		{name: "vary", vary: func(int32) string { return "Accept-Language" }, blocked: 1},
		{name: "vary grows", vary: func(n int32) string {
			if n == 1 {
				return "Accept-Language"
			}
			return "Accept-Language, Accept"
		}, blocked: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			started, release := make(chan struct{}), make(chan struct{})
			fleet := tagFleet(t, 2, middleware.Options{}, func(r chi.Router) {
				r.Get("/live", func(w http.ResponseWriter, r *http.Request) {
					n := runs.Add(1)
					w.Header().Set("Surrogate-Key", "live")
					if v := tc.vary(n); v != "" {
						w.Header().Set("Vary", v)
					}
					if n == tc.blocked {
						close(started)
						parked(release)
					}
					fmt.Fprintf(w, "run %d", n)
				})
			})
			a, b := fleet[0], fleet[1]
			if tc.blocked > 1 { // a marker first, for another language
				get(t, a.url+"/live", map[string]string{"Accept-Language": "en"})
			}
			de := map[string]string{"Accept-Language": "de"}
			purged := fmt.Sprintf("run %d", tc.blocked)
			answer := make(chan reply, 1)
			go func() { answer <- get(t, a.url+"/live", de) }()
			recv(t, started, "the run the purge overlaps to start")
			if err := middleware.Purge(t.Context(), b.c, "live"); err != nil {
				t.Fatal(err)
			}
			close(release) // the run returns its response only now, after the purge returned
			got := recv(t, answer, "the request whose run the purge overlapped")
			if got.body == purged {
				t.Fatalf("the purged run's response was served to its own request (%s)", got.header.Get("X-Cache"))
			}
			// (A purged marker may cost one more run: "vary grows".)
			for round := range 2 {
				for i, rep := range fleet {
					got := get(t, rep.url+"/live", de)
					if got.body == purged {
						t.Fatalf("replica %d served the purged run's response (%s)", i, got.header.Get("X-Cache"))
					}
					if round == 1 && got.header.Get("X-Cache") != middleware.StatusHit {
						t.Errorf("replica %d: %s %q, want a HIT of a run after the purge", i, got.header.Get("X-Cache"), got.body)
					}
				}
			}
		})
	}
}

// When every run of a request is purged while it runs, the cache stops
// running it again (ErrInvalidated): the request is answered 503 with
// Retry-After, never by one of its purged runs, and nothing is stored; the
// next request is answered by a run after the purges.
func TestRequestPurgedOnEveryRunIsUnavailable(t *testing.T) {
	var runs atomic.Int32
	var purging atomic.Bool // the runs of the first request are purged
	purging.Store(true)
	started, release := make(chan int32), make(chan struct{})
	fleet := tagFleet(t, 2, middleware.Options{}, func(r chi.Router) {
		r.Get("/hot", func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			w.Header().Set("Surrogate-Key", "hot")
			if purging.Load() {
				started <- n
				parked(release)
			}
			fmt.Fprintf(w, "run %d", n)
		})
	})
	a, b := fleet[0], fleet[1]
	answer := make(chan reply, 1)
	go func() { answer <- get(t, a.url+"/hot", nil) }()
	var got reply
	purged := 0
	for done := false; !done; {
		select {
		case <-started:
			if err := middleware.Purge(t.Context(), b.c, "hot"); err != nil {
				t.Fatal(err)
			}
			purged++
			release <- struct{}{} // this run returns only after its purge returned
		case got = <-answer:
			done = true
		case <-time.After(30 * time.Second):
			t.Fatalf("no answer after %d purged runs", purged)
		}
	}
	if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" {
		t.Fatalf("after %d purged runs: %d %q (%s), want 503 with Retry-After", purged, got.status, got.body, got.header.Get("X-Cache"))
	}
	if purged < 2 {
		t.Errorf("the request was given up after %d purged run(s); the cache runs it again after a purge", purged)
	}
	purging.Store(false)
	want := fmt.Sprintf("run %d", purged+1)
	for i, rep := range fleet {
		got := get(t, rep.url+"/hot", nil)
		if got.body != want {
			t.Errorf("replica %d after the purges: %d %q (%s), want the new %s", i, got.status, got.body, got.header.Get("X-Cache"), want)
		}
	}
}

// Tag headers never reach a client, on any path: a miss, a hit, a
// streamed (flushed) response, a bypass, an unsafe method, a 103; unless
// KeepTagHeaders.
func TestTagHeadersAreStrippedOnEveryPath(t *testing.T) {
	handler := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Surrogate-Key", "a b")
		w.Header().Add("Cache-Tag", "c,d")
		if r.URL.Query().Has("hints") {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		if r.URL.Query().Has("flush") {
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
		}
		fmt.Fprint(w, "body")
	}
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			c := newResponses(t, redistest.Client(t), cache.Options{TTL: time.Hour})
			srv := serve(t, c, middleware.Options{KeepTagHeaders: keep}, http.HandlerFunc(handler))
			check := func(what string, rep reply) {
				t.Helper()
				_, sk := rep.header["Surrogate-Key"]
				_, ct := rep.header["Cache-Tag"]
				if keep && (!sk || !ct) {
					t.Errorf("%s: tag headers dropped with KeepTagHeaders: %v", what, rep.header)
				}
				if !keep {
					assertNoTagHeaders(t, rep, what)
				}
			}
			check("miss", get(t, srv.URL+"/x", nil))
			check("hit", get(t, srv.URL+"/x", nil))
			check("flushed", get(t, srv.URL+"/x?flush", nil))
			check("bypass", get(t, srv.URL+"/x", map[string]string{"Authorization": "Bearer x"}))
			check("post", do(t, http.MethodPost, srv.URL+"/x", nil))
			check("hints", get(t, srv.URL+"/x?hints", nil))
			check("conditional hit", get(t, srv.URL+"/x", map[string]string{"Range": "bytes=0-1"}))
		})
	}
}

// A response with more keys than the cache allows on one entry is answered
// (without its tag headers) and not stored: a purge could not reach it.
func TestResponseWithTooManySurrogateKeysIsNotStored(t *testing.T) {
	var keys []string
	for i := range 100 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	h := &counting{write: func(w http.ResponseWriter, _ *http.Request, n int32) {
		w.Header().Set("Surrogate-Key", strings.Join(keys, " "))
		fmt.Fprintf(w, "run %d", n)
	}}
	c := newResponses(t, redistest.Client(t), cache.Options{TTL: time.Hour})
	srv := serve(t, c, middleware.Options{}, h)
	for i := range 2 {
		rep := get(t, srv.URL+"/many", nil)
		if want := fmt.Sprintf("run %d", i+1); rep.status != http.StatusOK || rep.body != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, rep.status, rep.body, want)
		}
		assertNoTagHeaders(t, rep, "too many keys")
	}
}

// Tag outside a cached run, or with a key no header could carry, is a
// clear error; Purge with a nil cache or an empty key too.
func TestTagAndPurgeRejectBadInput(t *testing.T) {
	if err := middleware.Tag(context.Background(), "a"); !errors.Is(err, middleware.ErrNotTagged) {
		t.Errorf("Tag outside a run: %v, want ErrNotTagged", err)
	}
	var tagErr error
	var once sync.Once
	c := newResponses(t, redistest.Client(t), cache.Options{TTL: time.Hour})
	srv := serve(t, c, middleware.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { tagErr = middleware.Tag(r.Context(), "a b") })
		if err := middleware.Tag(r.Context(), "ok"); err != nil {
			t.Error(err)
		}
		fmt.Fprint(w, "body")
	}))
	get(t, srv.URL+"/x", nil)
	if !errors.Is(tagErr, cache.ErrInvalidTag) {
		t.Errorf("Tag(a b): %v, want ErrInvalidTag", tagErr)
	}
	if err := middleware.Purge(t.Context(), nil, "a"); err == nil {
		t.Error("Purge with a nil cache: no error")
	}
	if err := middleware.Purge(t.Context(), c, ""); !errors.Is(err, cache.ErrInvalidTag) {
		t.Errorf("Purge(\"\"): %v, want ErrInvalidTag", err)
	}
	if err := middleware.Purge(t.Context(), c); err != nil {
		t.Errorf("Purge of no keys: %v", err)
	}
}

// The purge handler answers bad input with a clear 4xx, never a panic, and
// purges nothing then.
func TestPurgeHandlerRejectsBadInput(t *testing.T) {
	c := newResponses(t, redistest.Client(t), cache.Options{TTL: time.Hour})
	mux := http.NewServeMux()
	mux.Handle("/purge", middleware.PurgeHandler(c))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jsonType := map[string]string{"Content-Type": "application/json"}
	for _, tc := range []struct {
		name   string
		method string
		hdr    map[string]string
		body   string
		want   int
	}{
		{name: "GET", method: http.MethodGet, hdr: map[string]string{"Surrogate-Key": "a"}, want: http.StatusMethodNotAllowed},
		{name: "DELETE", method: http.MethodDelete, hdr: map[string]string{"Surrogate-Key": "a"}, want: http.StatusMethodNotAllowed},
		{name: "no keys", method: "PURGE", want: http.StatusBadRequest},
		{name: "blank Surrogate-Key", method: "PURGE", hdr: map[string]string{"Surrogate-Key": "  "}, want: http.StatusBadRequest},
		{name: "empty Cache-Tags", method: "PURGE", hdr: map[string]string{"Cache-Tag": ", ,"}, want: http.StatusBadRequest},
		{name: "broken JSON", method: http.MethodPost, hdr: jsonType, body: `{"tags": [`, want: http.StatusBadRequest},
		{name: "JSON of another shape", method: http.MethodPost, hdr: jsonType, body: `{"tags": "a"}`, want: http.StatusBadRequest},
		{name: "JSON without tags", method: http.MethodPost, hdr: jsonType, body: `{}`, want: http.StatusBadRequest},
		{name: "JSON empty key", method: http.MethodPost, hdr: jsonType, body: `{"tags": ["a", ""]}`, want: http.StatusBadRequest},
		{name: "JSON key with a space", method: http.MethodPost, hdr: jsonType, body: `{"tags": ["a b"]}`, want: http.StatusBadRequest},
		{name: "body of another type", method: http.MethodPost, hdr: map[string]string{"Content-Type": "text/plain"}, body: "a b", want: http.StatusUnsupportedMediaType},
		{name: "body without a type", method: "PURGE", body: `{"tags": ["a"]}`, want: http.StatusUnsupportedMediaType},
		{name: "body over 1 MiB", method: http.MethodPost, hdr: jsonType, body: `{"tags": ["` + strings.Repeat("a", 1<<20) + `"]}`, want: http.StatusRequestEntityTooLarge},
		{name: "header and JSON", method: http.MethodPost, hdr: map[string]string{"Content-Type": "application/json; charset=utf-8", "Surrogate-Key": "a b"}, body: `{"tags": ["c"]}`, want: http.StatusOK},
		{name: "many keys", method: "PURGE", hdr: map[string]string{"Surrogate-Key": strings.Repeat("k ", 500)}, want: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := purgeReq(t, srv.URL, tc.method, tc.hdr, tc.body)
			if rep.status != tc.want {
				t.Fatalf("%d %q, want %d", rep.status, rep.body, tc.want)
			}
			if tc.want == http.StatusMethodNotAllowed && rep.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	t.Run("nil cache", func(t *testing.T) {
		nilSrv := httptest.NewServer(middleware.PurgeHandler(nil))
		t.Cleanup(nilSrv.Close)
		req, _ := http.NewRequest("PURGE", nilSrv.URL, nil)
		req.Header.Set("Surrogate-Key", "a")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%d, want 503", res.StatusCode)
		}
	})
}

// A purge Redis cannot take is not guaranteed: Purge says so with
// cache.ErrUnavailable, the purge handler with a 503.
func TestPurgeWithoutRedisIsUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.RefusingAddr(t), MaxRetries: -1}) // connections refused
	t.Cleanup(func() { _ = rdb.Close() })
	c := newResponses(t, rdb, cache.Options{TTL: time.Hour})
	if err := middleware.Purge(t.Context(), c, "a"); !errors.Is(err, cache.ErrUnavailable) {
		t.Errorf("Purge: %v, want ErrUnavailable", err)
	}
	srv := httptest.NewServer(middleware.PurgeHandler(c))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(middleware.MethodPurge, srv.URL, nil)
	req.Header.Set("Surrogate-Key", "a")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("%d, want 503", res.StatusCode)
	}
}

// A request that switches protocols (a WebSocket, say) reaches its handler
// with the server's own writer: http.Hijacker by type assertion, as
// WebSocket libraries look for it.
func TestUpgradeRequestKeepsTheHijacker(t *testing.T) {
	c := newResponses(t, redistest.Client(t), cache.Options{TTL: time.Hour})
	srv := serve(t, c, middleware.Options{}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			http.Error(w, "no Hijacker", http.StatusInternalServerError)
			return
		}
		conn, buf, err := hj.Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		_ = buf.Flush()
	}))
	rep := get(t, srv.URL+"/ws", map[string]string{"Upgrade": "test", "Connection": "Upgrade"})
	if rep.status != http.StatusSwitchingProtocols {
		t.Fatalf("%d %q, want 101", rep.status, rep.body)
	}
}

// The tags live in the stored header: a background refresh the handler
// answers 304 (without its tag headers) keeps them, and a purge still
// reaches the refreshed entry.
func TestRefreshAnswered304KeepsTheTags(t *testing.T) {
	var full, notModified atomic.Int32
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		if r.Header.Get("If-None-Match") == `"v1"` {
			notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		full.Add(1)
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Surrogate-Key", "doc")
		fmt.Fprintf(w, "full %d", n)
	}}
	c := newResponses(t, redistest.Client(t), cache.Options{})
	srv := serve(t, c, middleware.Options{TTL: time.Millisecond, Stale: time.Hour}, h)
	get(t, srv.URL+"/doc", nil)
	for r := get(t, srv.URL+"/doc", nil); r.header.Get("X-Cache") != "STALE"; r = get(t, srv.URL+"/doc", nil) {
		if r.header.Get("X-Cache") != "HIT" {
			t.Fatalf("before the refresh: %s", r.header.Get("X-Cache"))
		}
	}
	waitFramesGone(t, backgroundFrame)
	if full.Load() != 1 || notModified.Load() != 1 {
		t.Fatalf("full runs %d, 304s %d: want one of each", full.Load(), notModified.Load())
	}
	if err := middleware.Purge(t.Context(), c, "doc"); err != nil {
		t.Fatal(err)
	}
	r := get(t, srv.URL+"/doc", nil)
	if r.header.Get("X-Cache") != middleware.StatusMiss || full.Load() != 2 {
		t.Fatalf("after the purge: %s %q (full runs %d), want a MISS and a full run", r.header.Get("X-Cache"), r.body, full.Load())
	}
	assertNoTagHeaders(t, r, "after the purge")
}
