package middleware_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/middleware"
)

// A handler tags its response with surrogate keys (a Surrogate-Key or
// Cache-Tag header, or middleware.Tag); a purge of a key, on any replica,
// invalidates every response tagged with it fleet-wide.
func Example_purgeBySurrogateKey() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	responses, err := middleware.NewCache(rdb, cache.Options{Namespace: "http"})
	if err != nil {
		log.Fatal(err)
	}
	defer responses.Close()

	chi.RegisterMethod(middleware.MethodPurge) // before building the router: chi answers 405 to methods it does not know
	r := chi.NewRouter()
	r.With(middleware.Cache(responses)).Get("/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		w.Header().Set("Surrogate-Key", "report-"+id+" reports") // read and removed by the middleware
		_ = middleware.Tag(r.Context(), "owner-7")               // the same, in code
		fmt.Fprintf(w, "report %s", id)
	})
	// The purge endpoint authorises nothing: put it behind your own.
	r.With(requireAdmin).Handle("/purge", middleware.PurgeHandler(responses))
	srv := httptest.NewServer(r)
	defer srv.Close()

	get := func() {
		res, err := http.Get(srv.URL + "/reports/42")
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Println(res.Header.Get("X-Cache"), string(body), res.Header.Get("Surrogate-Key") == "")
	}
	get()
	get()

	// Purge over HTTP (or in code: middleware.Purge(ctx, responses, "report-42")).
	req, _ := http.NewRequest(middleware.MethodPurge, srv.URL+"/purge", nil)
	req.Header.Set("Surrogate-Key", "report-42")
	req.Header.Set("Authorization", "Bearer admin-token")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	fmt.Println(res.Status)
	get()
	// On an empty Redis, this prints:
	//   MISS report 42 true
	//   HIT report 42 true
	//   200 OK
	//   MISS report 42 true
}

// requireAdmin stands for the application's own authorisation.
func requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer admin-token" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
