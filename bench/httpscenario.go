package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/middleware"
)

// runHTTP puts R instances of a chi server with an expensive route on
// loopback listeners and drives them with vegeta at a fixed rate, requests
// spread round-robin, with the stampede middleware on or off.
func runHTTP(ctx context.Context, cfg config, admin *redis.Client, newClient func() *redis.Client, withMiddleware bool, dist keyDist, progress *progress) (Result, error) {
	name := "middleware-off"
	if withMiddleware {
		name = "middleware-on"
	}
	o := newOrigin(cfg.originLatency, cfg.valueSize)
	maxAge := strconv.Itoa(max(int(cfg.ttl/time.Second), 1))
	ttl := time.Duration(max(int(cfg.ttl/time.Second), 1)) * time.Second
	ns := fmt.Sprintf("bench.%d.http", time.Now().UnixNano())
	var urls []string
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for range cfg.httpInstances {
		rdb := newClient()
		responses, err := middleware.NewCache(rdb, cache.Options{Namespace: ns, TTL: ttl})
		if err != nil {
			return Result{}, err
		}
		r := chi.NewRouter()
		route := r.With()
		if withMiddleware {
			route = r.With(middleware.Cache(responses))
		}
		route.Get("/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
			v, err := o.fetch(r.Context(), chi.URLParam(r, "id"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Cache-Control", "max-age="+maxAge)
			_, _ = w.Write(v)
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return Result{}, err
		}
		srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		urls = append(urls, "http://"+ln.Addr().String())
		closers = append(closers, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			_ = responses.Close()
			_ = rdb.Close()
		})
	}

	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(7, 11))
	var next atomic.Uint64
	targeter := func(t *vegeta.Target) error {
		mu.Lock()
		key := dist.pick(rng)
		mu.Unlock()
		t.Method = http.MethodGet
		t.URL = urls[next.Add(1)%uint64(len(urls))] + "/reports/" + key
		t.Header = http.Header{"Host": {"reports.example"}}
		return nil
	}
	attacker := vegeta.NewAttacker(vegeta.Timeout(30*time.Second), vegeta.KeepAlive(true),
		vegeta.Workers(64), vegeta.MaxWorkers(4096), vegeta.MaxConnections(4096))
	rate := vegeta.Rate{Freq: cfg.httpRate, Per: time.Second}

	before := commandCalls(ctx, admin)
	rec := newRecorder(1)
	start := time.Now()
	progress.start(fmt.Sprintf("http/%s %s", dist.name, name), start, cfg.duration, &rec.done)
	for res := range attacker.Attack(vegeta.Targeter(targeter), rate, cfg.duration, name) {
		var err error
		switch {
		case res.Error != "":
			err = errors.New(res.Error)
		case res.Code != http.StatusOK:
			err = fmt.Errorf("status %d", res.Code)
		}
		outcome := res.Headers.Get("X-Cache")
		if outcome == "" {
			outcome = "origin"
		}
		rec.done.Add(1)
		if res.Timestamp.After(start.Add(cfg.duration / 5)) { // leave the cold start out
			rec.record(0, res.Latency, outcome, err)
		}
		if ctx.Err() != nil {
			attacker.Stop()
		}
	}
	elapsed := time.Since(start)
	progress.stop()
	after := commandCalls(ctx, admin)
	h := rec.merged()
	res := Result{
		Scenario: "http", Strategy: name, Keys: dist.name, Replicas: cfg.httpInstances,
		Description: fmt.Sprintf("%d chi instances, vegeta at %d req/s round-robin", cfg.httpInstances, cfg.httpRate),
		DurationSec: elapsed.Seconds(), Requests: rec.requests.Load(), AllRequests: rec.done.Load(), Errors: rec.errors.Load(),
		OriginCalls: o.calls.Load(), Expiries: o.expiries(ttl / 2), PeakOrigin: o.peak.Load(),
		Latency: latencies(h), Outcomes: rec.outcomeMap(), RedisCommands: commandsBetween(before, after), cdf: cdf(h),
		InProcessOnly: !withMiddleware,
	}
	res.finish(elapsed - cfg.duration/5)
	return res, nil
}
