package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// runHits measures the hit path alone: one hot key that never expires
// during the run, R replicas x C callers in a closed loop (no think time),
// the same value size for every implementation. raw-get is a bare go-redis
// GET of a value of the same size, the floor.
func runHits(ctx context.Context, cfg config, admin *redis.Client, newClient func() *redis.Client, name string, progress *progress) (Result, error) {
	env := &runEnv{origin: newOrigin(cfg.originLatency, cfg.valueSize), ttl: time.Hour,
		prefix: fmt.Sprintf("bench.%d.hits.%s.", time.Now().UnixNano(), name)}
	for range cfg.replicas {
		env.clients = append(env.clients, newClient())
	}
	defer func() {
		for _, c := range env.clients {
			_ = c.Close()
		}
	}()
	var s strategy
	var err error
	switch name {
	case "raw-get":
		err = env.clients[0].Set(ctx, env.prefix+"hot", env.origin.value, time.Hour).Err()
		s = rawGetStrategy{env}
	case "go-redis-cache":
		s, err = newGoRedisCache(env)
	case "stampede-wait":
		s, err = newStampede(false, false)(env)
	}
	if err != nil {
		return Result{}, err
	}
	defer s.close()
	for r := range cfg.replicas { // warm every replica
		if _, err := s.get(ctx, r, "hot"); err != nil {
			return Result{}, err
		}
	}
	before := commandCalls(ctx, admin)
	rec := newRecorder(cfg.replicas)
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	start := time.Now()
	progress.start("hits/hot "+name, start, cfg.duration, &rec.done)
	var wg sync.WaitGroup
	for r := range cfg.replicas {
		for range cfg.callers {
			wg.Go(func() {
				for runCtx.Err() == nil {
					t0 := time.Now()
					outcome, err := s.get(runCtx, r, "hot")
					if runCtx.Err() != nil {
						return
					}
					rec.done.Add(1)
					rec.record(r, time.Since(t0), outcome, err)
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	progress.stop()
	after := commandCalls(ctx, admin)
	h := rec.merged()
	res := Result{
		Scenario: "hits", Strategy: name, Keys: "hot", Replicas: cfg.replicas, Callers: cfg.callers,
		Description: "hit path only, closed loop", DurationSec: elapsed.Seconds(),
		Requests: rec.requests.Load(), AllRequests: rec.done.Load(), Errors: rec.errors.Load(), OriginCalls: env.origin.calls.Load(),
		PeakOrigin: env.origin.peak.Load(), // no Expiries: the key never expires during the run
		Latency:    latencies(h), Outcomes: rec.outcomeMap(), RedisCommands: commandsBetween(before, after), cdf: cdf(h),
	}
	res.finish(elapsed)
	return res, nil
}

type rawGetStrategy struct{ env *runEnv }

func (s rawGetStrategy) get(ctx context.Context, r int, key string) (string, error) {
	return "hit", s.env.clients[r].Get(ctx, s.env.prefix+key).Err()
}
func (rawGetStrategy) close() {}
