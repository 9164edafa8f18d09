package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/middleware"
)

// BenchmarkHit is the middleware's cost on a hit, without the network:
// a chi route over a process-local cache (the Redis round trip a fleet
// adds, 60–100 µs, is not in it).
func BenchmarkHit(b *testing.B) {
	c, err := middleware.NewCache(nil, cache.Options{Namespace: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := chi.NewRouter()
	r.With(middleware.Cache(c)).Get("/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "report %s", chi.URLParam(r, "id"))
	})
	req := httptest.NewRequest(http.MethodGet, "/reports/42", nil)
	req.Header.Set("Accept", "text/plain")
	req.Header.Set("User-Agent", "bench")
	r.ServeHTTP(httptest.NewRecorder(), req)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if w.Header().Get("X-Cache") != middleware.StatusHit {
			b.Fatal(w.Header())
		}
	}
}
