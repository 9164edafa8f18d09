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

func TestKeyIgnoresQueryOrder(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	a := get(t, srv.URL+"/r?a=1&b=2", nil)
	b := get(t, srv.URL+"/r?b=2&a=1", nil)
	c := get(t, srv.URL+"/r?a=1&b=3", nil)
	if a.body != b.body || b.header.Get("X-Cache") != "HIT" {
		t.Fatalf("query order split the entry: %q %q %s", a.body, b.body, b.header.Get("X-Cache"))
	}
	if c.body == a.body || h.runs.Load() != 2 {
		t.Fatalf("distinct queries shared an entry: %q %q", a.body, c.body)
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
