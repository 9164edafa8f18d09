// Command purge is docs/http.md's tagging example: a cached route whose
// responses carry surrogate keys, a purge endpoint, and a write that purges
// in code. It serves on -listen; the purge endpoint takes
// "Authorization: Bearer " and the -admin-token value.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/middleware"
)

// totals stands for the application's database.
var totals = struct {
	sync.Mutex
	byID map[string]int
}{byID: map[string]int{}}

// renderReport writes the report's page.
func renderReport(w http.ResponseWriter, id string) {
	totals.Lock()
	total := totals.byID[id]
	totals.Unlock()
	fmt.Fprintf(w, "report %s total %d\n", id, total)
}

func main() {
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP address")
	adminToken := flag.String("admin-token", "", "the bearer token the purge endpoint takes (none: it refuses every request)")
	flag.Parse()

	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
	defer rdb.Close()
	responses, err := middleware.NewCache(rdb, cache.Options{Namespace: "http", TTL: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer responses.Close()
	// adminOnly stands for the application's own authorisation.
	adminOnly := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if *adminToken == "" || r.Header.Get("Authorization") != "Bearer "+*adminToken {
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	}

	// docs:begin tags
	chi.RegisterMethod(middleware.MethodPurge) // once, before building routers: chi answers 405 to PURGE otherwise
	r := chi.NewRouter()
	r.With(middleware.Cache(responses)).Get("/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		w.Header().Set("Surrogate-Key", "report-"+id+" reports") // Fastly, Souin: whitespace-separated
		w.Header().Set("Cache-Tag", "owner-7,team-3")            // Cloudflare: comma-separated
		_ = middleware.Tag(r.Context(), "customer-"+id)          // the same, in code
		renderReport(w, id)
	})
	// The purge endpoint authorises nothing: mount it behind your own authorisation.
	r.With(adminOnly).Handle("/purge", middleware.PurgeHandler(responses))

	// after a write, in code:
	r.Put("/reports/{id}/total", func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		total, err := strconv.Atoi(r.FormValue("total"))
		if err != nil {
			http.Error(w, "total: "+err.Error(), http.StatusBadRequest)
			return
		}
		totals.Lock()
		totals.byID[id] = total
		totals.Unlock()
		if err := middleware.Purge(r.Context(), responses, "report-"+id); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable) // the write is done; the purge is not guaranteed
			return
		}
	})
	// docs:end tags

	log.Printf("listening on http://%s/reports/42", *listen)
	log.Fatal(http.ListenAndServe(*listen, r))
}
