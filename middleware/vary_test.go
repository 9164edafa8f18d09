package middleware_test

// A URL whose Vary list grows updates its marker.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

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
