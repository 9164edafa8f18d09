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

// BenchmarkHitTagHeaders is BenchmarkHit for a tagged route, with the tag
// headers stripped (the default: the writer is wrapped) and kept (no
// wrapper, the cost before surrogate keys), side by side:
//
//	go test -run '^$' -bench HitTagHeaders -count 5 ./middleware/
func BenchmarkHitTagHeaders(b *testing.B) {
	for _, keep := range []bool{false, true} {
		name := "tagheaders=strip"
		if keep {
			name = "tagheaders=keep"
		}
		b.Run(name, func(b *testing.B) {
			c, err := middleware.NewCache(nil, cache.Options{Namespace: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			r := chi.NewRouter()
			r.With(middleware.CacheWithOptions(c, middleware.Options{KeepTagHeaders: keep})).Get("/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Surrogate-Key", "report-"+chi.URLParam(r, "id")+" reports")
				fmt.Fprintf(w, "report %s", chi.URLParam(r, "id"))
			})
			req := httptest.NewRequest(http.MethodGet, "/reports/42", nil)
			req.Header.Set("Accept", "text/plain")
			r.ServeHTTP(httptest.NewRecorder(), req)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				r.ServeHTTP(w, req)
				if w.Header().Get("X-Cache") != middleware.StatusHit || (w.Header().Get("Surrogate-Key") == "") != !keep {
					b.Fatal(w.Header())
				}
			}
		})
	}
}
