package robustness

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/robustness/wire"
)

// Scenario is one run's set-up: the deployment, the replicas' options, the
// traffic and the nemeses.
type Scenario struct {
	Name string
	// Mode is "redis", "cluster", "sentinel" or "local".
	Mode string
	// Persistence runs the single Redis with an append-only file synced
	// on every write, so that a kill loses nothing.
	Persistence bool
	// Replicas is the number of replica processes; Clients the concurrent
	// callers on each.
	Replicas, Clients int
	// Duration is how long the traffic runs.
	Duration time.Duration
	// Recommended gives the replicas the README's recommended go-redis
	// options instead of go-redis' defaults.
	Recommended bool
	// Twin gives each replica a second cache on its client, with the
	// same namespace (wire.Config.Twin); every other client of a replica
	// calls it (HTTP operations aside).
	Twin    bool
	Options wire.Options
	Traffic Traffic
	// Nemeses are drawn from, one fault at a time, each healed after
	// FaultFor; the run is healthy for Calm between two.
	Nemeses        []string
	FaultFor, Calm time.Duration
	// Openings, when set, are the first faults of every run, in order (the
	// draws they replace are still made, so that the rest replays as
	// before), each lasting 1.5 FaultFor, the longest a fault lasts: faults
	// the scenario must meet every run, not one run in two.
	Openings []string
}

// run is one scenario's run in progress.
type run struct {
	sc     Scenario
	seed   int64
	clock  clock
	hist   *History
	origin *Origin
	env    env
	nextID atomic.Int64
	// clears is the Clear gate: a client's Clear holds it shared while it
	// runs, and a window round (rounds.go) holds it whole, so that no
	// Clear wipes the key the round judges; a Clear drawn while a round
	// holds it becomes an InvalidateTags of every tag group.
	clears sync.RWMutex
	// faults is held by the nemesis from a fault's injection to its heal,
	// and by a round that injects a fault of its own (slowRound), so
	// that faults stay one at a time, each healed before the next.
	faults sync.Mutex
}

// Run runs sc with seed and returns its history. Servers and processes it
// started are stopped before it returns. bin is the replica program.
func Run(sc Scenario, seed int64, bin string) (h *History, err error) {
	// One clock for the run, from its start: the origin stamps computes
	// on it, the clients invokes and returns, the nemesis its faults.
	r := &run{sc: sc, seed: seed, clock: clock{start: time.Now().UnixNano()}}
	r.hist = &History{Scenario: sc.Name, Seed: seed}
	if r.origin, err = newOrigin(r.clock, r.hist); err != nil {
		return nil, err
	}
	defer r.origin.Close()
	stop, err := r.deploy()
	defer stop()
	if err != nil {
		return nil, err
	}
	r.env.redisTimeout = sc.Options.RedisTimeout
	if r.env.redisTimeout <= 0 {
		r.env.redisTimeout = 250 * time.Millisecond // cache.Options' default
	}
	for i := range sc.Replicas {
		cfg := wire.Config{Replica: fmt.Sprintf("r%d", i), Mode: sc.Mode, Origin: r.origin.URL(),
			Recommended: sc.Recommended, Twin: sc.Twin, Options: sc.Options}
		switch sc.Mode {
		case "redis":
			p, err := faultproxy.New(r.env.server.Addr())
			if err != nil {
				return nil, err
			}
			defer p.Close()
			r.env.proxies = append(r.env.proxies, p)
			cfg.Addrs = []string{p.Addr()}
		case "cluster":
			cfg.Addrs = r.env.cluster.Addrs()
		case "sentinel":
			cfg.Addrs, cfg.SentinelMaster = r.env.sentinel.SentinelAddrs(), redisserver.SentinelMaster
		}
		rep, err := startReplica(bin, cfg)
		if err != nil {
			return nil, err
		}
		defer rep.Close(5 * time.Second)
		r.env.replicas = append(r.env.replicas, rep)
	}
	for _, rep := range r.env.replicas {
		if _, ok := rep.Do(wire.Request{ID: r.nextID.Add(1), Op: wire.OpStats, Deadline: time.Second}, 30*time.Second); !ok {
			return nil, fmt.Errorf("replica %s did not start: %s", rep.Name, rep.Logs())
		}
	}
	end := time.Now().Add(sc.Duration)
	var wg sync.WaitGroup
	for i, rep := range r.env.replicas {
		for j := range sc.Clients {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(i*1000+j)))
			twin := sc.Twin && j%2 == 1
			wg.Go(func() { r.client(rep, twin, rng, end) })
		}
	}
	// The window rounds draw from a stream of their own: the clients' and
	// the nemesis' draws are those of the same seed without them.
	wg.Go(func() { r.rounds(rand.New(rand.NewPCG(uint64(seed), 1<<33)), end) })
	nemesisDone := make(chan error, 1)
	go func() { nemesisDone <- r.nemesis(rand.New(rand.NewPCG(uint64(seed), 1<<32)), end, &wg) }()
	wg.Wait()
	r.hist.End = r.clock.now()
	defer func() { // after the replicas closed (deferred above, run first)
		r.hist.Logs = map[string]string{}
		for _, rep := range r.env.replicas {
			r.hist.Logs[rep.Name] = rep.Logs()
		}
	}()
	nemesisErr := <-nemesisDone
	for _, rep := range r.env.replicas {
		r.hist.Crashes = append(r.hist.Crashes, rep.Crashed()...)
	}
	if nemesisErr != nil && len(r.hist.Crashes) == 0 {
		// A nemesis that meets a replica that crashed fails too: the
		// crash is the finding (the checker's "no crash").
		return r.hist, fmt.Errorf("nemesis: %w", nemesisErr)
	}
	r.hist.sorted()
	return r.hist, nil
}

// deploy starts the scenario's Redis deployment.
func (r *run) deploy() (stop func(), err error) {
	switch r.sc.Mode {
	case "local":
		return func() {}, nil
	case "redis":
		var args []string
		if r.sc.Persistence {
			args = []string{"--appendonly", "yes", "--appendfsync", "always"}
		}
		r.env.server, err = redisserver.Start(redisserver.Options{Args: args})
		if err != nil {
			return func() {}, err
		}
		return func() { _ = r.env.server.Close() }, nil
	case "sentinel":
		if r.env.sentinel, err = redisserver.StartSentinel(); err != nil {
			return func() {}, err
		}
		return func() { _ = r.env.sentinel.Close() }, nil
	case "cluster":
		if r.env.cluster, err = redisserver.StartCluster(3, 1); err != nil {
			return func() {}, err
		}
		return func() { _ = r.env.cluster.Close() }, nil
	}
	return func() {}, fmt.Errorf("unknown mode %q", r.sc.Mode)
}

// client sends random operations to rep (to its twin cache, twin, but for
// the HTTP ones) until end.
func (r *run) client(rep *Replica, twin bool, rng *rand.Rand, end time.Time) {
	for time.Now().Before(end) {
		rep.waitActive()
		req, update := r.sc.Traffic.next(rng, r.nextID.Add(1))
		cleared := false
		if req.Op == wire.OpClear {
			if cleared = r.clears.TryRLock(); !cleared {
				// A window round is judging a key no Clear may wipe.
				req.Op, req.Tags = wire.OpInvalidateTags, allGroups()
			}
		}
		if update {
			r.origin.Write(req.Key)
		}
		var pair sync.WaitGroup
		if route, _ := wire.HTTPKey(req.Key); req.Op == wire.OpHTTPGet && route == joinKey && rng.IntN(2) == 0 {
			// A second request of the same principal at once (noise
			// flipped): when a run of another principal's is in flight,
			// both join it and neither is selected by its response; they
			// must share one run of their variant's (docs/http.md).
			second := req
			second.ID, second.Noise = r.nextID.Add(1), !req.Noise
			pair.Go(func() { r.call(rep, second, false) })
		}
		ok := r.call(rep, req, twin)
		pair.Wait()
		if cleared {
			r.clears.RUnlock()
		}
		if !ok {
			// The replica died (or hangs): wait for its next incarnation.
			time.Sleep(50 * time.Millisecond) // pacing a retry loop against a dead process, not synchronisation
		}
	}
}

// call sends req to rep (to its twin cache when twin, for the cache's
// operations) and records it; ok is false when no answer came.
func (r *run) call(rep *Replica, req wire.Request, twin bool) (ok bool) {
	return !r.do(rep, req, twin).Unknown
}

// do is call, and returns the operation recorded.
func (r *run) do(rep *Replica, req wire.Request, twin bool) *Op {
	op := &Op{Replica: rep.Name, Req: req, Invoke: r.clock.now()}
	if twin && !strings.HasPrefix(req.Op, "http-") {
		req.Twin, op.Req.Twin = true, true
		op.Replica = rep.Name + wire.TwinSuffix
	}
	resp, ok := rep.Do(req, req.Deadline+answerGrace)
	op.Return, op.Resp, op.Unknown = r.clock.now(), resp, !ok
	if ok && resp.Invoked != 0 { // the call's own interval, inside the one seen from here
		op.Invoke, op.Return = r.clock.at(resp.Invoked), r.clock.at(resp.Returned)
	}
	for _, at := range resp.Arrived {
		op.Arrived = append(op.Arrived, r.clock.at(at))
	}
	r.hist.addOp(op)
	return op
}

// answerGrace is how long past its deadline an operation may take before
// the suite stops waiting for it (and records its outcome as unknown).
const answerGrace = 15 * time.Second

// nemesis injects one fault at a time until end, each healed after
// FaultFor, with Calm between two (after the fault's settle when it may
// break one compute per key); it heals the last one before returning.
func (r *run) nemesis(rng *rand.Rand, end time.Time, calls *sync.WaitGroup) error {
	if len(r.sc.Nemeses) == 0 {
		return nil
	}
	for i := 0; ; i++ {
		opening := i < len(r.sc.Openings)
		calm := r.sc.Calm/2 + time.Duration(rng.Int64N(int64(r.sc.Calm)))
		if time.Now().Add(calm + r.sc.FaultFor).After(end) {
			return nil
		}
		time.Sleep(calm) // the schedule of faults is what is being run, not a wait for an event
		name := r.sc.Nemeses[rng.IntN(len(r.sc.Nemeses))]
		if opening {
			name = r.sc.Openings[i]
		}
		n := nemeses[name]()
		r.faults.Lock()
		if name == "vanish" {
			r.fillPools()
		}
		at := r.clock.now() // the fault may show from the moment its injection begins
		what, err := n.Inject(&r.env, rng)
		r.hist.event(at, n.Name()+": "+what, false)
		if err != nil {
			r.faults.Unlock()
			return fmt.Errorf("%s: %w", n.Name(), err)
		}
		if failsRedis(n.Name()) && time.Now().Before(end) { // the clients still run: calls is not done
			r.probeGets(calls, n.Name())
		}
		lasts := r.sc.FaultFor/2 + time.Duration(rng.Int64N(int64(r.sc.FaultFor)))
		if opening {
			// An opening fault lasts the longest of the range (the draw
			// is still made): long enough for the breaker to open, its
			// cooldown to end and the probe's call to be judged within
			// it (refusedOutageCost).
			lasts = r.sc.FaultFor * 3 / 2
		}
		time.Sleep(lasts) // how long the fault lasts
		err = n.Heal(&r.env)
		if err == nil {
			r.hist.event(r.clock.now(), n.Name()+": healed", true)
		}
		r.faults.Unlock()
		if err != nil {
			return fmt.Errorf("%s heal: %w", n.Name(), err)
		}
		if breaksOneCompute(n.Name()) {
			// Its effects may show until it settles; the calm before the
			// next fault begins after that, so that every run has
			// stretches where one compute per key is judged (the checker
			// excuses an overlap during a fault and its settle).
			time.Sleep(r.sc.settle()) // the schedule of faults, not a wait for an event
		}
	}
}
