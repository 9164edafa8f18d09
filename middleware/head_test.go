package middleware_test

// HEAD is answered from the GET entry, and a HEAD miss stores the GET body
// for later GETs; with chi too, as docs/http.md says to write it.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	chimiddleware "github.com/go-chi/chi/v5/middleware"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

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

func TestHeadServedFromGetEntry(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	g := get(t, srv.URL+"/h", nil)
	head := do(t, http.MethodHead, srv.URL+"/h", nil)
	if head.body != "" || head.header.Get("X-Cache") != "HIT" || head.header.Get("Content-Length") != fmt.Sprint(len(g.body)) {
		t.Fatalf("HEAD: %q %v", head.body, head.header)
	}
	// A HEAD miss stores the GET body for later GETs.
	h2 := &counting{}
	srv2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h2)
	do(t, http.MethodHead, srv2.URL+"/h", nil)
	if r := get(t, srv2.URL+"/h", nil); r.header.Get("X-Cache") != "HIT" || r.body != "run 1 for /h" {
		t.Fatalf("GET after HEAD miss: %s %q", r.header.Get("X-Cache"), r.body)
	}
}
