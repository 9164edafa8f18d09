// Command firstprogram is the README's first program: one cached
// computation and one cached chi route, against a Redis on localhost:6379.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	chimiddleware "github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/middleware"
)

// Report is what the expensive origin builds.
type Report struct {
	ID    string
	Total int
}

// buildReport stands for the expensive origin: a slow query, a remote call.
func buildReport(ctx context.Context, id string) (Report, error) {
	select {
	case <-time.After(200 * time.Millisecond):
		return Report{ID: id, Total: 1234}, nil
	case <-ctx.Done():
		return Report{}, ctx.Err()
	}
}

func main() {
	redisAddr := flag.String("redis", "localhost:6379", "Redis address")
	listen := flag.String("listen", "localhost:8080", "HTTP address")
	flag.Parse()

	// The client options we recommend (docs/operating.md says why).
	rdb := redis.NewClient(&redis.Options{
		Addr:                  *redisAddr,
		ContextTimeoutEnabled: true,                   // deadlines reach the socket: the hit path's read runs inline, no goroutine
		DialTimeout:           time.Second,            // a dial the budget abandoned is not retried for 5 s in the background
		ReadTimeout:           500 * time.Millisecond, // likewise for a read (default 3 s)
		WriteTimeout:          500 * time.Millisecond,
		MaxRetries:            1, // the breaker, not go-redis' backoff, handles an outage
	})
	defer rdb.Close()

	reports, err := cache.New[Report](rdb, cache.Options{
		Namespace: "reports",
		TTL:       time.Minute,      // fresh for this long
		Stale:     10 * time.Minute, // then served stale while one caller refreshes
	})
	if err != nil {
		log.Fatal(err)
	}
	defer reports.Close()

	// New does not dial: Ping finds a wrong address or a Redis that is down
	// now, and names the cause. The program runs on without Redis: each
	// computation is then local (Outcome Degraded) until Redis answers.
	pingCtx, cancelPing := context.WithTimeout(context.Background(), 2*time.Second)
	if err := reports.Ping(pingCtx); err != nil {
		log.Printf("Redis at %s is unreachable; computing locally, nothing shared with other processes, until it answers: %v", *redisAddr, err)
	}
	cancelPing()

	// When "42" is missing or expired, one caller in the whole fleet runs
	// buildReport; the others wait for its result or are served the stale one.
	r, err := reports.GetOrCompute(context.Background(), "42", func(ctx context.Context) (Report, error) {
		return buildReport(ctx, "42")
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("report", r.ID, "total", r.Total)

	// Whole responses, cached the same way: one handler run per URL and expiry.
	responses, err := middleware.NewCache(rdb, cache.Options{Namespace: "http", TTL: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer responses.Close()

	router := chi.NewRouter()
	router.Use(chimiddleware.GetHead) // HEAD goes to the GET route, answered from its entry
	router.With(middleware.Cache(responses)).Get("/reports/{id}", func(w http.ResponseWriter, req *http.Request) {
		report, err := buildReport(req.Context(), chi.URLParam(req, "id"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(report)
	})
	log.Printf("listening on http://%s/reports/42", *listen)
	log.Fatal(http.ListenAndServe(*listen, router))
}
