package middleware_test

// What the cache leaves to the handler: requests with Authorization or a
// no-store Cache-Control, methods other than GET and HEAD, a nil cache, and
// routes the middleware is not mounted on.

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

func TestAuthorizationPassesThrough(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	a := get(t, srv.URL+"/x", map[string]string{"Authorization": "Bearer alice"})
	b := get(t, srv.URL+"/x", map[string]string{"Authorization": "Bearer bob"})
	if a.body == b.body || a.header.Get("X-Cache") != "BYPASS" || h.runs.Load() != 2 {
		t.Fatalf("%q %q %s", a.body, b.body, a.header.Get("X-Cache"))
	}
	// Configured to cache them, they are.
	h2 := &counting{}
	srv2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{CacheAuthorized: true}, h2)
	get(t, srv2.URL+"/x", map[string]string{"Authorization": "Bearer alice"})
	if r := get(t, srv2.URL+"/x", map[string]string{"Authorization": "Bearer alice"}); r.header.Get("X-Cache") != "HIT" {
		t.Fatalf("CacheAuthorized: %s", r.header.Get("X-Cache"))
	}
}

// RFC 9111 §5.2.1.5: nothing of a no-store request, or its response, is
// stored.
func TestRequestNoStorePassesThrough(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	if r := get(t, srv.URL+"/ns", map[string]string{"Cache-Control": "no-store"}); r.header.Get("X-Cache") != "BYPASS" {
		t.Fatalf("no-store request: %s", r.header.Get("X-Cache"))
	}
	if r := get(t, srv.URL+"/ns", nil); r.header.Get("X-Cache") != "MISS" || h.runs.Load() != 2 {
		t.Fatalf("after a no-store request: %s, %d runs", r.header.Get("X-Cache"), h.runs.Load())
	}
}

func TestOtherMethodsPassThrough(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	for range 2 {
		if r := do(t, http.MethodPost, srv.URL+"/x", nil); r.header.Get("X-Cache") != "BYPASS" {
			t.Fatalf("POST: %s", r.header.Get("X-Cache"))
		}
	}
	if h.runs.Load() != 2 {
		t.Fatalf("runs %d", h.runs.Load())
	}
}

func TestChiRouteLevel(t *testing.T) {
	h := &counting{}
	c := newResponses(t, redistest.Client(t), cache.Options{})
	r := chi.NewRouter()
	r.With(middleware.Cache(c)).Get("/reports/{id}", h.ServeHTTP)
	r.Get("/live", h.ServeHTTP)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	get(t, srv.URL+"/reports/1", nil)
	if got := get(t, srv.URL+"/reports/1", nil); got.header.Get("X-Cache") != "HIT" {
		t.Fatalf("cached route: %s", got.header.Get("X-Cache"))
	}
	get(t, srv.URL+"/live", nil)
	if got := get(t, srv.URL+"/live", nil); got.header.Get("X-Cache") != "" || h.runs.Load() != 3 {
		t.Fatalf("uncached route: %q runs=%d", got.header.Get("X-Cache"), h.runs.Load())
	}
}

func TestNilCachePassesThrough(t *testing.T) {
	h := &counting{}
	srv := httptest.NewServer(middleware.Cache(nil)(h))
	t.Cleanup(srv.Close)
	if r := get(t, srv.URL+"/x", nil); r.header.Get("X-Cache") != "BYPASS" {
		t.Fatal(r.header)
	}
}
