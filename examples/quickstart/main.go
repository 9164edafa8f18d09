// Command quickstart shows a cache stampede stopped: R replicas x C callers
// ask for one expired key at the same instant, and it counts how many times
// the origin ran under three strategies.
//
//	go run -C examples ./quickstart
//
// It uses $REDIS_URL when set; otherwise it starts a redis-server child
// process on a free loopback port (or, without the binary, an in-process
// Redis-compatible server) and says which in its first line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/embedded"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

type config struct {
	replicas, callers int
	latency           time.Duration
}

func run(args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(out)
	var cfg config
	fs.IntVar(&cfg.replicas, "replicas", 4, "simulated replicas, each with its own cache and Redis client")
	fs.IntVar(&cfg.callers, "callers", 250, "concurrent callers per replica")
	fs.DurationVar(&cfg.latency, "latency", 100*time.Millisecond, "origin latency")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.replicas < 1 || cfg.callers < 1 || cfg.replicas*cfg.callers > 100_000 || cfg.latency < 0 || cfg.latency > time.Minute {
		return errors.New("need 1 <= replicas*callers <= 100000 and 0 <= latency <= 1m")
	}
	env, err := embedded.Open(getenv)
	if err != nil {
		return err
	}
	defer env.Close()
	fmt.Fprintln(out, "Redis:", env.Description)
	fmt.Fprintf(out, "%d replicas x %d callers ask for one expired key at once; the origin takes %s.\n\n",
		cfg.replicas, cfg.callers, cfg.latency)

	strategies := []struct {
		name string
		run  func(context.Context, config, *redis.Options, func(context.Context) (string, error)) (map[cache.Outcome]int, error)
	}{
		{"cache-aside (GET, compute on miss, SET)", cacheAside},
		{"in-process singleflight only", singleflightOnly},
		{"stampede (singleflight + Redis lease)", withLease},
	}
	fmt.Fprintf(out, "%-42s %13s %12s\n", "strategy", "origin calls", "wall time")
	var leaseCalls int64
	for _, s := range strategies {
		var calls atomic.Int64
		origin := func(ctx context.Context) (string, error) {
			calls.Add(1)
			select {
			case <-time.After(cfg.latency):
				return "the report", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		outcomes, err := s.run(ctx, cfg, env.Options, origin)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(out, "%-42s %13d %12s", s.name, calls.Load(), time.Since(start).Round(time.Millisecond))
		if outcomes != nil {
			fmt.Fprintf(out, "   %v", outcomes)
		}
		fmt.Fprintln(out)
		leaseCalls = calls.Load()
	}
	if leaseCalls != 1 {
		return fmt.Errorf("stampede let the origin run %d times, want 1", leaseCalls)
	}
	fmt.Fprintln(out, "\nWith the lease, one caller in the whole fleet computed; everyone else waited for its result.")
	return nil
}

// callers runs cfg.callers goroutines per replica, released at once.
func callers(cfg config, call func(replica int) error) error {
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, cfg.replicas*cfg.callers)
	for r := range cfg.replicas {
		for range cfg.callers {
			wg.Go(func() {
				<-start
				if err := call(r); err != nil {
					errs <- err
				}
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	return <-errs
}

func clients(cfg config, opts *redis.Options) ([]*redis.Client, func()) {
	cs := make([]*redis.Client, cfg.replicas)
	for i := range cs {
		cs[i] = redis.NewClient(opts)
	}
	return cs, func() {
		for _, c := range cs {
			_ = c.Close()
		}
	}
}

var runID = time.Now().UnixNano()

func cacheAside(ctx context.Context, cfg config, opts *redis.Options, origin func(context.Context) (string, error)) (map[cache.Outcome]int, error) {
	cs, done := clients(cfg, opts)
	defer done()
	key := fmt.Sprintf("quickstart:%d:aside", runID)
	defer cs[0].Del(context.Background(), key)
	return nil, callers(cfg, func(r int) error {
		v, err := cs[r].Get(ctx, key).Result()
		if err == nil && v != "" {
			return nil
		}
		if !errors.Is(err, redis.Nil) {
			return err
		}
		if v, err = origin(ctx); err != nil {
			return err
		}
		return cs[r].Set(ctx, key, v, time.Minute).Err()
	})
}

func singleflightOnly(ctx context.Context, cfg config, _ *redis.Options, origin func(context.Context) (string, error)) (map[cache.Outcome]int, error) {
	caches := make([]*cache.Cache[string], cfg.replicas)
	for i := range caches {
		c, err := cache.New[string](nil, cache.Options{TTL: time.Minute})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		caches[i] = c
	}
	return fetchAll(ctx, cfg, caches, origin)
}

func withLease(ctx context.Context, cfg config, opts *redis.Options, origin func(context.Context) (string, error)) (map[cache.Outcome]int, error) {
	cs, done := clients(cfg, opts)
	defer done()
	ns := fmt.Sprintf("quickstart-%d", runID)
	caches := make([]*cache.Cache[string], cfg.replicas)
	for i := range caches {
		c, err := cache.New[string](cs[i], cache.Options{Namespace: ns, TTL: time.Minute})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		caches[i] = c
	}
	defer caches[0].Delete(context.Background(), "report") //nolint:errcheck // best-effort cleanup of a shared REDIS_URL
	return fetchAll(ctx, cfg, caches, origin)
}

func fetchAll(ctx context.Context, cfg config, caches []*cache.Cache[string], origin func(context.Context) (string, error)) (map[cache.Outcome]int, error) {
	var mu sync.Mutex
	outcomes := map[cache.Outcome]int{}
	err := callers(cfg, func(r int) error {
		res, err := caches[r].Fetch(ctx, "report", origin)
		if err != nil {
			return err
		}
		mu.Lock()
		outcomes[res.Outcome]++
		mu.Unlock()
		return nil
	})
	return outcomes, err
}
