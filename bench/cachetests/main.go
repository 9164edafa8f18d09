// Command cachetests puts the HTTP middleware in front of the origin server
// of the public HTTP caching test suite (github.com/http-tests/cache-tests,
// the one cache-tests.fyi publishes), as a reverse proxy, so that the
// suite's client measures the middleware as a shared cache. It listens on
// loopback only. scripts/cache-tests starts the suite's server, this
// program and the suite's client, and counts the results.
//
//	go run -C bench ./cachetests -origin http://127.0.0.1:8000 -listen 127.0.0.1:8001
//
// Redis is $REDIS_URL, else a redis-server child process, else an
// in-process one (see internal/embedded); -local uses no Redis at all.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/embedded"
	"github.com/stampede-go/stampede/middleware"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	origin := flag.String("origin", "http://127.0.0.1:8000", "the suite's origin server")
	listen := flag.String("listen", "127.0.0.1:8001", "where the cache listens (loopback)")
	mode := flag.String("mode", "rfc", "rfc: DeclaredFreshnessOnly, a standards shared cache; app: an application cache with a 1 ms default TTL")
	local := flag.Bool("local", false, "a process-local cache, no Redis")
	staleIfError := flag.Duration("stale-if-error", 0, "the route's StaleIfError (mode app): how long an expired response is kept, and revalidated on the request path")
	verbose := flag.Bool("v", false, "log what is not stored")
	flag.Parse()

	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("cachetests: -listen: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("cachetests: -listen %s: loopback addresses only", *listen)
	}
	target, err := url.Parse(*origin)
	if err != nil {
		return fmt.Errorf("cachetests: -origin: %w", err)
	}

	var rdb redis.UniversalClient
	if !*local {
		env, err := embedded.Open(os.Getenv)
		if err != nil {
			return fmt.Errorf("cachetests: redis: %w", err)
		}
		defer env.Close()
		log.Print(env.Description)
		client := redis.NewClient(env.Options)
		defer client.Close()
		rdb = client
	}
	// A namespace of its own each run: the suite's URLs are unique per
	// run, but a rerun against the same Redis must not see old entries.
	ns := "cache-tests-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	// RedisTimeout: on a loaded machine a Redis step past the 250 ms
	// default opens the breaker, and a degraded run stores nothing, which
	// the suite would count against the middleware's rules.
	responses, err := middleware.NewCache(rdb, cache.Options{Namespace: ns, TTL: time.Millisecond, RedisTimeout: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("cachetests: %w", err)
	}
	defer responses.Close()

	opts := middleware.Options{StaleIfError: *staleIfError}
	switch *mode {
	case "rfc":
		opts.DeclaredFreshnessOnly = true
	case "app":
	default:
		return fmt.Errorf("cachetests: -mode %q: want rfc or app", *mode)
	}
	if *verbose {
		opts.Logger = slog.Default()
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := &http.Server{
		Addr:              *listen,
		Handler:           middleware.CacheWithOptions(responses, opts)(proxy),
		ReadHeaderTimeout: 10 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Printf("cache on http://%s in front of %s (mode %s)", *listen, target, *mode)
	select {
	case err := <-errc:
		return fmt.Errorf("cachetests: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("cachetests: shutdown: %w", err)
	}
	return nil
}
