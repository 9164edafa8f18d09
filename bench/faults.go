package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/faultproxy"
)

// The faults scenario (issue 15): each strategy in turn runs its R x C
// callers through a sequence of phases, a fault injected in each; every
// call is counted in the phase in which it started. Between phases the
// load runs without a fault for a settle time that is not measured, so
// each phase starts from a warm, healthy cache.
//
// Faults are injected through internal/faultproxy, a TCP proxy between
// every client of the run and Redis, rather than by stopping the
// redis-server child: it works the same against $REDIS_URL, it keeps the
// data (so the phase after the outage measures a recovery, not a cold
// cache), and it adds latency, which stopping a server cannot.

// faultLatency is what the redis-slow and redis-slowing phases add each
// way: one way under RedisTimeout, the round trip past it.
const faultLatency = 150 * time.Millisecond

// faultRampSteps is how many equal steps the redis-slowing phase raises the
// latency in, over the first third of the phase: a Redis that slows as
// load grows, against redis-slow's jump.
const faultRampSteps = 10

// faultGrace bounds how long calls still in flight when the last phase
// ends may take before they are cut (and counted as errors).
const faultGrace = 15 * time.Second

// faultStaleIfError is stampede's StaleIfError in this scenario: the
// entries of the origin-failing phase are inside it.
//
// stampede's strategies run with cache.Options' other defaults, among them
// RedisTimeout (250 ms per Redis step) and InvalidationWait (100 ms): the
// round trip of the redis-slow and redis-slowing phases (2 x faultLatency,
// 300 ms) is past both, a Redis slow, not down (issue 30), and the phases
// are judged by the origin's calls per second against the healthy phase's
// (column "× healthy": a slow Redis must not cost the origin more), not
// only by latency. redis-slow jumps past the budget at once, which for one
// budget no client can tell from a silent Redis (docs/operating.md);
// redis-slowing gets there in steps, as a Redis slows under growing load.
const faultStaleIfError = time.Minute

// quietRedisLog drops go-redis' own log lines ("failed to dial after 5
// attempts" for every pool, every second of an outage): each failure
// reaches the caller as an error, which the tables count.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// faultRig is what faults are injected through.
type faultRig struct {
	proxy   *faultproxy.Proxy
	down    atomic.Bool // new connections are refused while set
	refused string      // a loopback address nothing listens on
	origin  *origin
	// ramp is how long redis-slowing takes to reach faultLatency;
	// stopRamp ends a ramp under way and waits for it.
	ramp     time.Duration
	stopRamp func()
}

// slowDown raises the proxy's latency to faultLatency in faultRampSteps
// equal steps over f.ramp, on a goroutine that f.stopRamp ends.
func (f *faultRig) slowDown() {
	stop, done := make(chan struct{}), make(chan struct{})
	f.stopRamp = func() { close(stop); <-done }
	go func() {
		defer close(done)
		tick := time.NewTicker(max(f.ramp/faultRampSteps, time.Millisecond))
		defer tick.Stop()
		for i := 1; ; i++ {
			f.proxy.SetLatency(faultLatency * time.Duration(i) / faultRampSteps)
			if i == faultRampSteps {
				return
			}
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}()
}

// speedUp ends redis-slowing: the ramp stops and the latency goes.
func (f *faultRig) speedUp() {
	f.stopRamp()
	f.proxy.SetLatency(0)
}

// faultPhase is one phase of the faults scenario.
type faultPhase struct {
	name, description string
	inject, clear     func(*faultRig)
}

var faultPhases = []faultPhase{
	{"healthy", "no fault: the baseline",
		func(*faultRig) {}, func(*faultRig) {}},
	{"redis-down", "Redis refuses connections: open ones are reset, new ones refused",
		func(f *faultRig) { f.down.Store(true); f.proxy.Reset() }, func(f *faultRig) { f.down.Store(false) }},
	{"origin-failing", "the origin answers every call with an error at once (stampede: entries inside StaleIfError 1m)",
		func(f *faultRig) { f.origin.failing.Store(true) }, func(f *faultRig) { f.origin.failing.Store(false) }},
	{"redis-slow", fmt.Sprintf("+%s each way between every client and Redis, at once", faultLatency),
		func(f *faultRig) { f.proxy.SetLatency(faultLatency) }, func(f *faultRig) { f.proxy.SetLatency(0) }},
	{"redis-slowing", fmt.Sprintf("the same +%s each way, reached in %d equal steps over the phase's first third, as under growing load", faultLatency, faultRampSteps),
		(*faultRig).slowDown, (*faultRig).speedUp},
}

func faultPhaseNames() []string {
	var out []string
	for _, p := range faultPhases {
		out = append(out, p.name)
	}
	return out
}

// refusedAddr returns a loopback address on which nothing listens: a
// connection to it is refused by the kernel, as one to a stopped Redis is.
func refusedAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// faultClientOptions connects through the rig's proxy, and dials the
// refused address instead while Redis is "down".
func faultClientOptions(base *redis.Options, rig *faultRig) (*redis.Options, error) {
	if base.Network == "unix" || base.TLSConfig != nil {
		return nil, errors.New("the faults scenario needs Redis over plain TCP (its proxy forwards TCP, no TLS)")
	}
	opts := *base
	opts.Addr = rig.proxy.Addr()
	var d net.Dialer
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if rig.down.Load() {
			return d.DialContext(ctx, "tcp", rig.refused)
		}
		return d.DialContext(ctx, network, addr)
	}
	return &opts, nil
}

// runFaults runs one strategy through every fault phase and returns one
// result per phase.
func runFaults(ctx context.Context, cfg config, admin *redis.Client, base *redis.Options, def strategyDef, dist keyDist, progress *progress) ([]Result, error) {
	rig := &faultRig{origin: newOrigin(cfg.originLatency, cfg.valueSize), ramp: cfg.faultPhase / 3}
	var err error
	if rig.refused, err = refusedAddr(); err != nil {
		return nil, err
	}
	if rig.proxy, err = faultproxy.New(base.Addr); err != nil {
		return nil, err
	}
	defer rig.proxy.Close()
	opts, err := faultClientOptions(base, rig)
	if err != nil {
		return nil, err
	}
	env := &runEnv{origin: rig.origin, ttl: cfg.ttl, staleIfError: faultStaleIfError,
		prefix: fmt.Sprintf("bench.%d.faults.%s.%s.", time.Now().UnixNano(), def.name, dist.name)}
	for range cfg.replicas {
		env.clients = append(env.clients, redis.NewClient(opts))
	}
	defer func() {
		for _, c := range env.clients {
			_ = c.Close()
		}
	}()
	s, err := def.build(env)
	if err != nil {
		return nil, err
	}
	defer s.close()
	defer func() { _, _ = redisFootprint(context.WithoutCancel(ctx), admin, env.prefix) }() // delete the run's keys
	ss, _ := s.(*stampedeStrategy)

	n := len(faultPhases)
	recs := make([]*recorder, n)
	for i := range recs {
		recs[i] = newRecorder(cfg.replicas)
	}
	var done atomic.Int64 // every completed call: for the progress line
	var phase atomic.Int32
	phase.Store(-1) // settling: calls are not recorded
	stop := make(chan struct{})
	total := time.Duration(n) * (cfg.faultSettle + cfg.faultPhase)
	callCtx, cancel := context.WithTimeout(ctx, total+faultGrace)
	defer cancel()
	start := time.Now()
	progress.start(fmt.Sprintf("faults/%s %s", dist.name, def.name), start, total, &done)
	var wg sync.WaitGroup
	for r := range cfg.replicas {
		for c := range cfg.callers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(r), uint64(c)))
				think := time.NewTimer(time.Hour)
				defer think.Stop()
				for callCtx.Err() == nil {
					select {
					case <-stop:
						return
					default:
					}
					ph := phase.Load()
					key := dist.pick(rng)
					t0 := time.Now()
					outcome, err := s.get(callCtx, r, key)
					lat := time.Since(t0)
					done.Add(1)
					if ph >= 0 {
						recs[ph].record(r, lat, outcome, err)
					}
					if cfg.think > 0 {
						think.Reset(cfg.think/2 + rand.N(cfg.think+1))
						select {
						case <-think.C:
						case <-stop:
							return
						case <-callCtx.Done():
						}
					}
				}
			})
		}
	}

	elapsed := make([]time.Duration, n)
	originCalls := make([]int64, n)
	events := make([]map[string]int64, n)
	wait := func(d time.Duration) bool { return sleepCtx(ctx, d) == nil }
	for i, fp := range faultPhases {
		if !wait(cfg.faultSettle) {
			break
		}
		calls0 := rig.origin.calls.Load()
		var events0 map[string]int64
		if ss != nil {
			events0 = ss.events.snapshot()
		}
		fp.inject(rig)
		t0 := time.Now()
		phase.Store(int32(i))
		ok := wait(cfg.faultPhase)
		phase.Store(-1)
		elapsed[i] = time.Since(t0)
		originCalls[i] = rig.origin.calls.Load() - calls0
		fp.clear(rig)
		if ss != nil {
			events[i] = eventsBetween(events0, ss.events.snapshot())
		}
		if !ok {
			break
		}
	}
	close(stop)
	wg.Wait()
	progress.stop()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	var out []Result
	for i, fp := range faultPhases {
		h := recs[i].merged()
		res := Result{
			Scenario: "faults", Strategy: def.name, Keys: dist.name, Phase: fp.name, Description: fp.description,
			Replicas: cfg.replicas, Callers: cfg.callers, InProcessOnly: def.inProcess,
			DurationSec: elapsed[i].Seconds(), Requests: recs[i].requests.Load(), AllRequests: recs[i].requests.Load(),
			Errors: recs[i].errors.Load(), OriginCalls: originCalls[i], Latency: latencies(h),
			Outcomes: recs[i].outcomeMap(), RedisCommands: -1, Events: events[i], cdf: cdf(h),
		}
		if elapsed[i] > 0 {
			res.OriginPerSec = float64(originCalls[i]) / elapsed[i].Seconds()
		}
		res.finish(elapsed[i])
		out = append(out, res)
	}
	// Each phase's origin calls against the healthy phase's (the first):
	// the redis-slow phase is judged by it, not only by latency.
	if len(out) > 0 && out[0].OriginPerSec > 0 {
		for i := range out {
			out[i].OriginVsHealthy = out[i].OriginPerSec / out[0].OriginPerSec
		}
	}
	return out, nil
}

// eventsBetween is how many events of each kind happened between two
// snapshots.
func eventsBetween(before, after map[string]int64) map[string]int64 {
	d := maps.Clone(after)
	for k, n := range before {
		d[k] -= n
		if d[k] == 0 {
			delete(d, k)
		}
	}
	if len(d) == 0 {
		return nil
	}
	return d
}
