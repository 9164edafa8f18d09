// Command httpcache is docs/http.md's first example: the response cache on
// chi routes and on a plain net/http mux, with route-level options, and in
// front of a reverse proxy as an RFC 9111 shared cache. It serves the chi
// router on -listen and the mux on -listen-plain; the mux's other paths go
// to -upstream.
package main

import (
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	chimiddleware "github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/middleware"
)

// runs counts the handlers' runs: the cache answers the other requests.
var runs atomic.Int64

// reportHandler stands for an expensive page: chi and net/http both give it
// the route's {id}.
func reportHandler(w http.ResponseWriter, r *http.Request) {
	time.Sleep(100 * time.Millisecond) // a slow query
	fmt.Fprintf(w, "report %s (handler run %d)\n", r.PathValue("id"), runs.Add(1))
}

// dashboardHandler's response differs by tenant.
func dashboardHandler(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "dashboard %s for tenant %q (handler run %d)\n", r.PathValue("id"), r.Header.Get("X-Tenant"), runs.Add(1))
}

func main() {
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP address of the chi router")
	listenPlain := flag.String("listen-plain", "127.0.0.1:8081", "HTTP address of the plain net/http mux")
	upstream := flag.String("upstream", "http://127.0.0.1:9000", "the origin behind the mux's reverse proxy")
	flag.Parse()

	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
	defer rdb.Close()
	target, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)

	// docs:begin routes
	responses, err := middleware.NewCache(rdb, cache.Options{Namespace: "http", TTL: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer responses.Close()

	// chi, route level. GetHead (chi's own middleware, on the router, before the routes) sends HEAD
	// to the GET route: without it chi answers HEAD with 405 before the route's middleware runs.
	r := chi.NewRouter()
	r.Use(chimiddleware.GetHead)
	r.With(middleware.Cache(responses)).Get("/reports/{id}", reportHandler)

	// route-level options:
	r.With(middleware.CacheWithOptions(responses, middleware.Options{
		TTL: 30 * time.Second, Stale: time.Minute, VaryHeaders: []string{"X-Tenant"},
	})).Get("/dashboards/{id}", dashboardHandler)

	// plain net/http ("GET /path" patterns match HEAD too):
	mux := http.NewServeMux()
	mux.Handle("GET /reports/{id}", middleware.Cache(responses)(http.HandlerFunc(reportHandler)))

	// in front of any handler or reverse proxy, as an RFC 9111 shared cache:
	mux.Handle("/", middleware.CacheWithOptions(responses, middleware.Options{
		DeclaredFreshnessOnly: true, Logger: slog.Default(),
	})(proxy))
	// docs:end routes

	go func() { log.Fatal(http.ListenAndServe(*listenPlain, mux)) }()
	log.Printf("listening on http://%s/reports/42 (chi) and http://%s/reports/42 (net/http)", *listen, *listenPlain)
	log.Fatal(http.ListenAndServe(*listen, r))
}
