package middleware_test

// Surrogate keys, the tagging half (surrogate.go), end to end: tag headers
// never reach a client, a writer wrapped to strip them still hijacks, a
// response with too many keys is not stored, and a refresh answered 304
// keeps its tags.

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

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

// A request that asks to switch protocols but is answered as any other
// (the handler does not hijack) gets no tag header either.
func TestUpgradeRequestAnsweredPlainlyHasNoTagHeaders(t *testing.T) {
	c := newResponses(t, redistest.Client(t), cache.Options{TTL: time.Hour})
	srv := serve(t, c, middleware.Options{}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Surrogate-Key", "internal-key")
		w.Header().Set("Cache-Tag", "internal-tag")
		http.Error(w, "upgrade not supported here", http.StatusUpgradeRequired)
	}))
	rep := get(t, srv.URL+"/ws", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"})
	if rep.status != http.StatusUpgradeRequired {
		t.Fatalf("%d %q, want 426", rep.status, rep.body)
	}
	assertNoTagHeaders(t, rep, "an Upgrade request answered plainly")
}
