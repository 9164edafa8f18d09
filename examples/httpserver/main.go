// Command httpserver is a chi server with an expensive route behind the
// stampede middleware:
//
//	GET /reports/{id}  takes -delay (default 200ms) and counts its executions
//	GET /healthz       liveness
//	GET /stats         JSON counters: executions, and the cache's outcomes
//	GET /metrics       Prometheus metrics (see contrib/prometheus)
//
// REDIS_URL selects Redis; without it the server runs on an embedded one (a
// redis-server child process, or an in-process server when no binary
// exists) and says which in its first log line. SIGINT or SIGTERM shuts it
// down gracefully.
//
//	go run -C examples ./httpserver -addr 127.0.0.1:8080
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	chimiddleware "github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/contrib/prometheus"
	"github.com/stampede-go/stampede/internal/embedded"
	"github.com/stampede-go/stampede/middleware"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, os.Getenv, nil); err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
}

// Server is the example's handler and its counters.
type Server struct {
	Responses  *cache.Cache[middleware.Response]
	Metrics    *prometheus.Registry
	Delay      time.Duration
	executions atomic.Int64
}

// Executions is how many times the expensive route ran.
func (s *Server) Executions() int64 { return s.executions.Load() }

// Routes returns the chi router.
func (s *Server) Routes() http.Handler {
	r := chi.NewRouter()
	r.Use(chimiddleware.GetHead) // HEAD reaches the GET route, answered from its cache entry
	r.With(middleware.Cache(s.Responses)).Get("/reports/{id}", s.report)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	r.Get("/stats", s.stats)
	if s.Metrics != nil {
		r.Handle("/metrics", promhttp.HandlerFor(s.Metrics, promhttp.HandlerOpts{}))
	}
	return r
}

func (s *Server) report(w http.ResponseWriter, r *http.Request) {
	n := s.executions.Add(1)
	select {
	case <-time.After(s.Delay): // the expensive part
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=5, stale-while-revalidate=30, stale-if-error=300")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"report": chi.URLParam(r, "id"), "execution": n, "built_at": time.Now().UTC().Format(time.RFC3339Nano),
	})
}

// StatsBody is what /stats returns.
type StatsBody struct {
	Executions int64  `json:"executions"`
	Hits       uint64 `json:"hits"`
	Misses     uint64 `json:"misses"`
	Shared     uint64 `json:"shared"`
	Waited     uint64 `json:"waited"`
	Stale      uint64 `json:"stale"`
	Degraded   uint64 `json:"degraded"`
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	st := s.Responses.Stats()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(StatsBody{Executions: s.Executions(), Hits: st.Hits, Misses: st.Misses,
		Shared: st.Shared, Waited: st.Waited, Stale: st.Stale, Degraded: st.Degraded})
}

// run serves until ctx is done. ready, when not nil, receives the listening
// address once the server accepts connections.
func run(ctx context.Context, args []string, logOut io.Writer, getenv func(string) string, ready chan<- string) error {
	fs := flag.NewFlagSet("httpserver", flag.ContinueOnError)
	fs.SetOutput(logOut)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address (loopback by default)")
	delay := fs.Duration("delay", 200*time.Millisecond, "how long /reports/{id} takes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *delay < 0 {
		return errors.New("-delay must not be negative")
	}
	logger := slog.New(slog.NewTextHandler(logOut, nil))
	env, err := embedded.Open(getenv)
	if err != nil {
		return err
	}
	defer env.Close()
	logger.Info("redis", "using", env.Description)
	rdb := redis.NewClient(env.Options)
	defer rdb.Close()
	metrics := prometheus.NewRegistry()
	obs := stampedeprom.New(stampedeprom.Options{})
	metrics.MustRegister(obs)
	responses, err := middleware.NewCache(rdb, cache.Options{Namespace: "httpserver", TTL: 5 * time.Second,
		Observer: obs, Logger: logger})
	if err != nil {
		return err
	}
	defer responses.Close()
	s := &Server{Responses: responses, Metrics: metrics, Delay: *delay}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Routes(), ReadHeaderTimeout: 5 * time.Second}
	logger.Info("listening", "addr", "http://"+ln.Addr().String(), "delay", *delay)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("stopped", "executions", s.Executions())
	return nil
}
