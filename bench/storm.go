package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
)

// keyDist picks the key of each request.
type keyDist struct {
	name string
	pick func(rng *rand.Rand) string
}

func distributions(keys int) []keyDist {
	names := make([]string, keys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	return []keyDist{
		{"hot", func(*rand.Rand) string { return "hot" }},
		{fmt.Sprintf("zipf-%d", keys), func(rng *rand.Rand) string {
			// Zipf with s = 1.1 over the key space: a few keys take most requests.
			z := rand.NewZipf(rng, 1.1, 1, uint64(keys-1))
			return names[z.Uint64()]
		}},
	}
}

// recorder collects latencies (one histogram per replica) and outcomes.
type recorder struct {
	mu       []sync.Mutex
	hists    []*hdrhistogram.Histogram
	outcomes sync.Map // string -> *atomic.Int64
	requests atomic.Int64
	errors   atomic.Int64
	done     atomic.Int64 // every completed call, warm-up included: for the progress line

	fillMu sync.Mutex
	fill   *hdrhistogram.Histogram // fill-to-waiter latencies
}

func newRecorder(replicas int) *recorder {
	r := &recorder{mu: make([]sync.Mutex, replicas), fill: newHist()}
	for range replicas {
		r.hists = append(r.hists, newHist())
	}
	return r
}

func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
}

func (r *recorder) record(replica int, lat time.Duration, outcome string, err error) {
	r.requests.Add(1)
	if err != nil {
		r.errors.Add(1)
		outcome = "error"
	}
	c, _ := r.outcomes.LoadOrStore(outcome, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	r.mu[replica].Lock()
	_ = r.hists[replica].RecordValue(max(lat.Microseconds(), 1))
	r.mu[replica].Unlock()
}

// recordFill records one waiter's return, d after the compute it waited
// for returned.
func (r *recorder) recordFill(d time.Duration) {
	r.fillMu.Lock()
	_ = r.fill.RecordValue(max(d.Microseconds(), 1))
	r.fillMu.Unlock()
}

// fillLatency is the fill-to-waiter percentiles, nil without samples.
func (r *recorder) fillLatency() (*Latency, int64) {
	r.fillMu.Lock()
	defer r.fillMu.Unlock()
	if n := r.fill.TotalCount(); n > 0 {
		l := latencies(r.fill)
		return &l, n
	}
	return nil, 0
}

func (r *recorder) merged() *hdrhistogram.Histogram {
	h := newHist()
	for i, x := range r.hists {
		r.mu[i].Lock()
		h.Merge(x)
		r.mu[i].Unlock()
	}
	return h
}

func (r *recorder) outcomeMap() map[string]int64 {
	m := map[string]int64{}
	r.outcomes.Range(func(k, v any) bool {
		m[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return m
}

// runStorm runs one strategy on one key distribution.
func runStorm(ctx context.Context, cfg config, admin *redis.Client, newClient func() *redis.Client, def strategyDef, dist keyDist, progress *progress) (Result, error) {
	env := &runEnv{origin: newOrigin(cfg.originLatency, cfg.valueSize), ttl: cfg.ttl,
		prefix: fmt.Sprintf("bench.%d.%s.%s.", time.Now().UnixNano(), def.name, dist.name)}
	for range cfg.replicas {
		env.clients = append(env.clients, newClient())
	}
	defer func() {
		for _, c := range env.clients {
			_ = c.Close()
		}
	}()
	s, err := def.build(env)
	if err != nil {
		return Result{}, err
	}
	defer s.close()

	if err := primeFootprint(ctx, admin, env.prefix); err != nil {
		return Result{}, fmt.Errorf("redis footprint: %w", err)
	}
	beforeCmds, before, _ := commandStats(ctx, admin)
	rec := newRecorder(cfg.replicas)
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	start := time.Now()
	progress.start(fmt.Sprintf("storm/%s %s", dist.name, def.name), start, cfg.duration, &rec.done)
	warmEnd := start.Add(cfg.duration / 5)
	warmc := make(chan heapFigure, 1)
	warmTimer := time.AfterFunc(cfg.duration/5, func() { warmc <- heapNow() })
	var wg sync.WaitGroup
	for r := range cfg.replicas {
		for c := range cfg.callers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(r), uint64(c)))
				think := time.NewTimer(0)
				defer think.Stop()
				<-think.C
				for runCtx.Err() == nil {
					key := dist.pick(rng)
					t0 := time.Now()
					outcome, err := s.get(runCtx, r, key)
					end := time.Now()
					if runCtx.Err() != nil {
						return // the run ended mid-call: not a figure
					}
					rec.done.Add(1)
					if t0.After(warmEnd) { // the cold start is not the storm: leave it out
						rec.record(r, end.Sub(t0), outcome, err)
						if outcome == "waited" && err == nil {
							// The value this caller waited for came from the
							// latest compute of key that returned.
							if filled := env.origin.lastReturn(key); !filled.IsZero() && filled.Before(end) {
								rec.recordFill(end.Sub(filled))
							}
						}
					}
					if cfg.think > 0 {
						// Spread callers out: a think time in ±50%.
						think.Reset(cfg.think/2 + rand.N(cfg.think+1))
						select {
						case <-think.C:
						case <-runCtx.Done():
						}
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	var warm heapFigure
	if !warmTimer.Stop() {
		warm = <-warmc
	}
	progress.stop()
	end := heapNow()
	afterCmds, after, _ := commandStats(ctx, admin)
	h := rec.merged()
	res := Result{
		Scenario: "storm", Strategy: def.name, Keys: dist.name, Description: def.description,
		Replicas: cfg.replicas, Callers: cfg.callers, InProcessOnly: def.inProcess,
		DurationSec:   elapsed.Seconds(),
		Requests:      rec.requests.Load(),
		AllRequests:   rec.done.Load(),
		Errors:        rec.errors.Load(),
		OriginCalls:   env.origin.calls.Load(),
		Expiries:      env.origin.expiries(cfg.ttl / 2),
		PeakOrigin:    env.origin.peak.Load(),
		Latency:       latencies(h),
		Outcomes:      rec.outcomeMap(),
		RedisCommands: commandsBetween(before, after),
		HeapWarmMB:    warm.mb, HeapEndMB: end.mb,
		cdf: cdf(h),
	}
	// The origin's figures are read above, before the footprint deletes the
	// run's keys: a process whose callers have gone may still be waiting
	// for a key, detached from them, and would recompute a key it finds
	// deleted; that call is not the run's.
	fp, err := redisFootprint(ctx, admin, env.prefix)
	if err != nil {
		return Result{}, fmt.Errorf("redis footprint: %w", err)
	}
	res.RedisKeys, res.RedisBytesKey = fp.keys, fp.bytesPerKey
	res.FillToWaiter, res.FillSamples = rec.fillLatency()
	res.finish(elapsed - cfg.duration/5)
	// Commands per request over every request of the run, cold start
	// included, as RedisCommands counts them.
	res.CommandMix = commandMix(beforeCmds, afterCmds, rec.done.Load())
	if ss, ok := s.(*stampedeStrategy); ok {
		st := ss.stats()
		res.FencedOut, res.Refreshes = st.FencedOut, st.Refreshes
		res.Events = ss.events.snapshot()
	}
	return res, nil
}

type heapFigure struct{ mb float64 }

// heapNow is the live heap after a GC.
func heapNow() heapFigure {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return heapFigure{mb: float64(m.HeapAlloc) / (1 << 20)}
}
