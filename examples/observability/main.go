// Command observability is docs/observability.md's example: one cache
// observed by the Prometheus and OpenTelemetry adapters, /metrics served,
// every stampede_* family exported at 0 before any traffic.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	stampedeotel "github.com/stampede-go/stampede/contrib/otel"       // go.opentelemetry.io/otel
	stampedeprom "github.com/stampede-go/stampede/contrib/prometheus" // client_golang
)

// Report is what the expensive origin builds.
type Report struct {
	ID    string
	Total int
}

func main() {
	redisAddr := flag.String("redis", "localhost:6379", "Redis address")
	listen := flag.String("listen", "localhost:8080", "HTTP address")
	flag.Parse()

	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
	defer rdb.Close()

	// Metrics. Namespaces: every series of "reports" exists, at 0, from
	// registration, so a dashboard or an alert sees 0 rather than no data.
	prom := stampedeprom.New(stampedeprom.Options{Namespaces: []string{"reports"}})
	prometheus.MustRegister(prom)
	// Traces: spans stampede.compute and stampede.wait, children of the caller's span.
	traces := stampedeotel.New(stampedeotel.Options{})

	reports, err := cache.New[Report](rdb, cache.Options{
		Namespace: "reports",
		TTL:       time.Minute,
		Logger:    slog.Default(),
		// Both adapters. A cache.ObserverFunc has no Init method, so
		// cache.New cannot create the namespace's series through it: the
		// Namespaces option above does. With Prometheus alone,
		// Observer: prom does both.
		Observer: cache.ObserverFunc(func(ctx context.Context, e cache.Event) {
			prom.Observe(ctx, e)
			traces.Observe(ctx, e)
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer reports.Close()

	http.Handle("GET /metrics", promhttp.Handler())
	http.HandleFunc("GET /reports/{id}", func(w http.ResponseWriter, req *http.Request) {
		id := req.PathValue("id")
		report, err := reports.GetOrCompute(req.Context(), id, func(ctx context.Context) (Report, error) {
			return Report{ID: id, Total: 1234}, nil // stands for a slow query
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(report)
	})
	log.Printf("listening on http://%s/metrics", *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}
