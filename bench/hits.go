package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// hitsSlices is how many slices each implementation's run of the hits
// scenario is cut into. The slices run in turn (A B C A B C …), so that the
// load of other processes on the machine, which drifts over seconds, weighs
// on every implementation alike and the ratios within a run stay fair.
const hitsSlices = 6

// hitsNames are the implementations of the hits scenario, in their order.
var hitsNames = []string{"raw-get", "go-redis-cache", "stampede-wait"}

// hitsRun is one implementation's part of the hits scenario.
type hitsRun struct {
	name    string
	env     *runEnv
	s       strategy
	rec     *recorder
	elapsed time.Duration
	cmds    int64 // -1: unknown
}

// runHits measures the hit path alone: one hot key that never expires
// during the run, R replicas x C callers in a closed loop (no think time),
// the same value size for every implementation. raw-get is a bare go-redis
// GET of a value of the same size, the floor. Each implementation runs for
// cfg.duration in all, in hitsSlices slices taken in turn.
func runHits(ctx context.Context, cfg config, admin *redis.Client, newClient func() *redis.Client, progress *progress) ([]Result, error) {
	var runs []*hitsRun
	defer func() {
		for _, r := range runs {
			if r.s != nil {
				r.s.close()
			}
			for _, c := range r.env.clients {
				_ = c.Close()
			}
		}
	}()
	for _, name := range hitsNames {
		r := &hitsRun{name: name, rec: newRecorder(cfg.replicas), env: &runEnv{origin: newOrigin(cfg.originLatency, cfg.valueSize), ttl: time.Hour,
			prefix: fmt.Sprintf("bench.%d.hits.%s.", time.Now().UnixNano(), name)}}
		runs = append(runs, r)
		for range cfg.replicas {
			r.env.clients = append(r.env.clients, newClient())
		}
		var err error
		switch name {
		case "raw-get":
			err = r.env.clients[0].Set(ctx, r.env.prefix+"hot", r.env.origin.value, time.Hour).Err()
			r.s = rawGetStrategy{r.env}
		case "go-redis-cache":
			r.s, err = newGoRedisCache(r.env)
		case "stampede-wait":
			r.s, err = newStampede(false, false)(r.env)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for rep := range cfg.replicas { // warm every replica
			if _, err := r.s.get(ctx, rep, "hot"); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	slice := cfg.duration / hitsSlices
	for i := range hitsSlices {
		for _, r := range runs {
			before := commandCalls(ctx, admin)
			r.elapsed += r.slice(ctx, cfg, slice, fmt.Sprintf("hits/hot %s %d/%d", r.name, i+1, hitsSlices), progress)
			n := commandsBetween(before, commandCalls(ctx, admin))
			if n < 0 || r.cmds < 0 {
				r.cmds = -1
			} else {
				r.cmds += n
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	var out []Result
	for _, r := range runs {
		h := r.rec.merged()
		res := Result{
			Scenario: "hits", Strategy: r.name, Keys: "hot", Replicas: cfg.replicas, Callers: cfg.callers,
			Description: "hit path only, closed loop", DurationSec: r.elapsed.Seconds(),
			Requests: r.rec.requests.Load(), AllRequests: r.rec.done.Load(), Errors: r.rec.errors.Load(), OriginCalls: r.env.origin.calls.Load(),
			PeakOrigin: r.env.origin.peak.Load(), // no Expiries: the key never expires during the run
			Latency:    latencies(h), Outcomes: r.rec.outcomeMap(), RedisCommands: r.cmds, cdf: cdf(h),
		}
		res.finish(r.elapsed)
		out = append(out, res)
	}
	return out, nil
}

// slice runs R x C callers of the hot key for d and returns how long they
// ran. Each call's context has a deadline a minute away, as a request's
// might (go-redis honours it on the socket with ContextTimeoutEnabled): the
// slice ends by a flag the callers check between calls, not by cancelling
// calls in flight, so that no call near the end of a slice runs under a
// deadline shorter than any real request's.
func (r *hitsRun) slice(ctx context.Context, cfg config, d time.Duration, name string, progress *progress) time.Duration {
	callCtx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	var over atomic.Bool
	stop := time.AfterFunc(d, func() { over.Store(true) })
	defer stop.Stop()
	start := time.Now()
	progress.start(name, start, d, &r.rec.done)
	var wg sync.WaitGroup
	for rep := range cfg.replicas {
		for range cfg.callers {
			wg.Go(func() {
				for !over.Load() && callCtx.Err() == nil {
					t0 := time.Now()
					outcome, err := r.s.get(callCtx, rep, "hot")
					if over.Load() || callCtx.Err() != nil {
						return // ended past the slice: not counted
					}
					r.rec.done.Add(1)
					r.rec.record(rep, time.Since(t0), outcome, err)
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	progress.stop()
	return elapsed
}

type rawGetStrategy struct{ env *runEnv }

func (s rawGetStrategy) get(ctx context.Context, r int, key string) (string, error) {
	return "hit", s.env.clients[r].Get(ctx, s.env.prefix+key).Err()
}
func (rawGetStrategy) close() {}
