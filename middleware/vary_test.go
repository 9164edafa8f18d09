package middleware_test

// A URL whose Vary list grows updates its marker, unless an unsafe request
// retired its variants meanwhile.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
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

// A variant's run that learns a longer Vary list while an unsafe request
// retires the URL's variants (a POST during the run) does not point the
// URL's marker back at the retired generation: the response made before the
// POST answers nothing after it.
func TestVariantRunDoesNotUndoAnInvalidation(t *testing.T) {
	var version atomic.Int32
	version.Store(1)
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			version.Add(1)
			return
		}
		lang, v := r.Header.Get("Accept-Language"), version.Load()
		if lang == "fr" {
			parked(release)
			w.Header().Set("Vary", "Accept-Language, X-Theme")
		} else {
			w.Header().Set("Vary", "Accept-Language")
		}
		fmt.Fprintf(w, "v%d %s", v, lang)
	})
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	url := srv.URL + "/doc"
	get(t, url, map[string]string{"Accept-Language": "en"}) // the marker and the en variant
	var wg sync.WaitGroup
	wg.Go(func() { get(t, url, map[string]string{"Accept-Language": "fr"}) }) // reads v1, parked
	leakcheck.WaitBlocked(t, "middleware_test.parked(", 1, 10*time.Second)
	if r := do(t, http.MethodPost, url, nil); r.status != http.StatusOK {
		t.Fatalf("POST: %d", r.status)
	}
	if r := get(t, url, map[string]string{"Accept-Language": "en"}); r.body != "v2 en" {
		t.Fatalf("after the POST, en: %s %q", r.header.Get("X-Cache"), r.body)
	}
	close(release)
	waitAll(t, &wg, "the fr request")
	if r := get(t, url, map[string]string{"Accept-Language": "fr"}); r.body != "v2 fr" {
		t.Fatalf("after the POST, fr: %s %q, want v2 fr", r.header.Get("X-Cache"), r.body)
	}
}
