package middleware_test

// The storage rules end to end (storage.go's, applied by store.go): a
// private response reaches only its own request, a failure or a panic is
// not stored, only the configured statuses are, a 5xx is answered with a
// response kept for stale-if-error, and what is not stored is logged.

import (
	"bytes"
	"fmt"
	"io"
	"log"
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

// Responses that are private to a client are never served to another, not
// even to requests that were waiting on the same compute.
func TestPrivateResponsesAreNeverShared(t *testing.T) {
	cases := map[string]func(w http.ResponseWriter, n int32){
		"set-cookie": func(w http.ResponseWriter, n int32) {
			http.SetCookie(w, &http.Cookie{Name: "session", Value: fmt.Sprint("secret-", n)})
		},
		"no-store": func(w http.ResponseWriter, n int32) { w.Header().Set("Cache-Control", "no-store") },
		"private":  func(w http.ResponseWriter, n int32) { w.Header().Set("Cache-Control", "private, max-age=60") },
		"no-cache": func(w http.ResponseWriter, n int32) { w.Header().Set("Cache-Control", "no-cache") },
		"vary-*":   func(w http.ResponseWriter, n int32) { w.Header().Set("Vary", "*") },
	}
	for name, mark := range cases {
		t.Run(name, func(t *testing.T) {
			h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, r *http.Request, n int32) {
				mark(w, n)
				fmt.Fprintf(w, "for client %s #%d", r.Header.Get("X-Client"), n)
			}}
			srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
			const n = 20
			replies := clientsOnOneRun(t, srv.URL+"/me", n, h.release)
			for i, r := range replies {
				if !strings.HasPrefix(r.body, fmt.Sprintf("for client %d #", i)) {
					t.Fatalf("client %d got %q", i, r.body)
				}
			}
			if runs := h.runs.Load(); runs != n {
				t.Fatalf("handler ran %d times for %d clients", runs, n)
			}
			after := get(t, srv.URL+"/me", map[string]string{"X-Client": "late"})
			if after.body != fmt.Sprintf("for client late #%d", n+1) {
				t.Fatalf("a private response was stored: %q", after.body)
			}
		})
	}
}

func TestPanicAnd500StoreNothing(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		if fail.Load() {
			if r.URL.Path == "/panic" {
				panic("handler exploded")
			}
			http.Error(w, "upstream down", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "ok #%d", n)
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	if r := get(t, srv.URL+"/500", nil); r.status != http.StatusInternalServerError {
		t.Fatalf("500 route: %d", r.status)
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic is expected
	preq, _ := http.NewRequest(http.MethodGet, srv.URL+"/panic", nil)
	preq.Host = host
	res, err := client.Do(preq)
	if err == nil { // the server aborts the connection of a panicking handler
		res.Body.Close()
		if res.StatusCode < 500 {
			t.Fatalf("panic route answered %d", res.StatusCode)
		}
	}
	fail.Store(false)
	for _, p := range []string{"/500", "/panic"} {
		if r := get(t, srv.URL+p, nil); r.status != http.StatusOK || r.header.Get("X-Cache") != "MISS" {
			t.Fatalf("%s after the failure: %d %s: the failure was stored", p, r.status, r.header.Get("X-Cache"))
		}
	}
}

func TestOnlyConfiguredStatusesStored(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		var code int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code)
		w.WriteHeader(code)
		fmt.Fprintf(w, "#%d", n)
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	for code, stored := range map[int]bool{200: true, 404: true, 410: true, 301: true, 302: false, 400: false, 503: false} {
		get(t, fmt.Sprint(srv.URL, "/", code), nil)
		second := get(t, fmt.Sprint(srv.URL, "/", code), nil)
		if got := second.header.Get("X-Cache") == "HIT"; got != stored || second.status != code {
			t.Errorf("status %d: stored=%v (%s), want %v", code, got, second.header.Get("X-Cache"), stored)
		}
	}
}

// A 5xx with stale-if-error is answered with the stale response.
func TestStaleIfErrorAnswers5xx(t *testing.T) {
	var fail atomic.Bool
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		if fail.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.Header().Set("Cache-Control", "stale-if-error=3600")
		fmt.Fprint(w, "good")
	}}
	// Fresh for the route's 1ms: no waiting for a TTL.
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{TTL: time.Millisecond}, h)
	if r := get(t, srv.URL+"/s", nil); r.body != "good" {
		t.Fatal(r.body)
	}
	fail.Store(true)
	r := get(t, srv.URL+"/s", nil)
	for r.header.Get("X-Cache") == "HIT" { // within the millisecond
		r = get(t, srv.URL+"/s", nil)
	}
	if r.status != http.StatusOK || r.body != "good" || r.header.Get("X-Cache") != "STALE" {
		t.Fatalf("%d %q %s", r.status, r.body, r.header.Get("X-Cache"))
	}
}

// A response that the cache cannot hold is served to its own request and
// logged, not dropped silently.
func TestNotStoredIsLogged(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs}, nil))
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		fmt.Fprint(w, strings.Repeat("z", 8000))
	}}
	c := newResponses(t, redistest.Client(t), cache.Options{MaxValueBytes: 4096})
	srv := serve(t, c, middleware.Options{Logger: logger}, h)
	for range 2 {
		if r := get(t, srv.URL+"/big", nil); r.header.Get("X-Cache") != "MISS" || len(r.body) != 8000 {
			t.Fatalf("%s %d", r.header.Get("X-Cache"), len(r.body))
		}
	}
	if got := strings.Count(logs.String(), "response not stored"); got != 2 || !strings.Contains(logs.String(), "value too large") {
		t.Fatalf("logs: %s", logs.String())
	}
}

// lockedWriter serialises writes (the logger may be called from several
// requests at once).
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
