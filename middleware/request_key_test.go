package middleware_test

// Which requests share an entry, end to end: the key ignores the order of
// the query, requests that differ in a Vary header (learned from the
// response, or configured) do not share one, and a URL too long to key
// bypasses the cache.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// The query is keyed as sent: a handler that reads r.URL.RawQuery (and
// echoes it) sees exactly what the key holds, so a raw `"><script>` and its
// encoded form, or two orders of the same parameters, never share an entry.
func TestKeyIsTheQueryAsSent(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		fmt.Fprintf(w, "run %d: %s", n, r.URL.RawQuery)
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	for i, q := range []string{"a=1&b=2", "b=2&a=1", "q=%22%3E%3Cscript%3E", `q="><script>`, "a=1&b=2"} {
		r := rawGet(t, srv.URL, "/r?"+q)
		want := fmt.Sprintf("run %d: %s", min(i+1, 1+i%4), q)
		if r.body != want {
			t.Errorf("?%s answered %q, want %q (%s)", q, r.body, want, r.header.Get("X-Cache"))
		}
	}
	if h.runs.Load() != 4 {
		t.Fatalf("handler ran %d times, want 4 (one per form of the query)", h.runs.Load())
	}
}

func TestVaryValuesDoNotShareAnEntry(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("Vary", "Accept-Language")
		fmt.Fprintf(w, "%s #%d", r.Header.Get("Accept-Language"), n)
	}}
	// Two instances: the learned Vary lives in Redis, not in one process.
	ns := redistest.Prefix(t)
	s1 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), middleware.Options{}, h)
	s2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), middleware.Options{}, h)
	en := get(t, s1.URL+"/p", map[string]string{"Accept-Language": "en"})
	fr := get(t, s2.URL+"/p", map[string]string{"Accept-Language": "fr"})
	en2 := get(t, s2.URL+"/p", map[string]string{"Accept-Language": "en"})
	fr2 := get(t, s1.URL+"/p", map[string]string{"Accept-Language": "fr"})
	if en.body != "en #1" || fr.body != "fr #2" || en2.body != "en #1" || fr2.body != "fr #2" {
		t.Fatalf("bodies %q %q %q %q", en.body, fr.body, en2.body, fr2.body)
	}
	if en.header.Get("X-Cache") != "MISS" || en2.header.Get("X-Cache") != "HIT" || fr2.header.Get("X-Cache") != "HIT" {
		t.Fatalf("statuses %s %s %s", en.header.Get("X-Cache"), en2.header.Get("X-Cache"), fr2.header.Get("X-Cache"))
	}
	if h.runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", h.runs.Load())
	}
}

func TestConfiguredVaryHeaders(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{VaryHeaders: []string{"x-tenant"}}, h)
	a := get(t, srv.URL+"/p", map[string]string{"X-Tenant": "a"})
	b := get(t, srv.URL+"/p", map[string]string{"X-Tenant": "b"})
	a2 := get(t, srv.URL+"/p", map[string]string{"X-Tenant": "a"})
	if a.body == b.body || a2.body != a.body || h.runs.Load() != 2 {
		t.Fatalf("%q %q %q runs=%d", a.body, b.body, a2.body, h.runs.Load())
	}
}

// A URL too long for the cache's MaxKeyBytes is answered by the handler,
// not with an error.
func TestKeyTooLongBypasses(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{MaxKeyBytes: 64}), middleware.Options{}, h)
	r := get(t, srv.URL+"/long?q="+strings.Repeat("a", 100), nil)
	if r.status != http.StatusOK || r.header.Get("X-Cache") != "BYPASS" || !strings.HasPrefix(r.body, "run 1 ") {
		t.Fatalf("%d %s %q", r.status, r.header.Get("X-Cache"), r.body)
	}
}
