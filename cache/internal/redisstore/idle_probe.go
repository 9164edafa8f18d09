package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The idle probe: one PING every probeEvery per go-redis client, shared by
// every cache built on it (reference-counted), whose round trip the
// caches' budgets hear (Budget.Heard) while their heartbeats are stopped.
//
// The invalidation subscription's heartbeat used to run whatever the
// traffic, and its answers taught an idle replica's budget that Redis had
// turned slow (issue 30), so that its first call afterwards waits for the
// slow reply instead of taking it for silence. The heartbeat now runs only
// while decisions want it (internal/notify's Heartbeat), so an idle
// process would learn nothing: the probe keeps that lesson for one command
// every probeEvery per client, however many caches use the client. It
// runs where the heartbeat ran: on a client that talks to one server
// (cache's oneServer), with a budget of our own.

// probeEvery is the idle probe's period: at most half a command a second
// per client, none while its steps are answered. A round trip that rises
// (Redis slowing as load comes) is followed within two probes, the
// budget's estimator following a rise with a gain of 1/2. A variable for
// the package's tests.
var probeEvery = 2 * time.Second

// probeTimeout bounds one probe: a reply slower than that teaches nothing
// a step's own budget would not.
const probeTimeout = 5 * time.Second

// probeGrace bounds how long the last cache's Close waits for a probe in
// flight (go-redis does not cut a read short at its context's end unless
// the client was built with ContextTimeoutEnabled).
const probeGrace = 100 * time.Millisecond

// probe is one client's idle probe.
type probe struct {
	refs int
	// heard are the registered caches' Budget.Heard, by registration;
	// the first is told (the caches of one client share what their
	// budgets observe of it, see redisstep's link).
	heard []*probeListener
	stop  context.CancelFunc
	done  chan struct{}
}

// probeListener is one cache's registration with its client's probe:
// its budget's Heard, whether its heartbeat runs, and whether a step of
// the client got a reply within a period (Budget.Answered).
type probeListener struct {
	heard    func(rtt time.Duration)
	beating  func() bool
	answered func(within time.Duration) bool
}

var probes = struct {
	sync.Mutex
	m map[*redis.Client]*probe
}{m: map[*redis.Client]*probe{}}

// ProbeIdle registers a cache's budget's heard and answered and its
// heartbeat's beating with rdb's idle probe, starting it for the first
// cache; call the function it returns when the cache closes.
func ProbeIdle(rdb *redis.Client, heard func(rtt time.Duration), beating func() bool, answered func(within time.Duration) bool) (release func()) {
	l := &probeListener{heard: heard, beating: beating, answered: answered}
	probes.Lock()
	defer probes.Unlock()
	p := probes.m[rdb]
	if p == nil {
		ctx, stop := context.WithCancel(context.Background())
		p = &probe{stop: stop, done: make(chan struct{})}
		probes.m[rdb] = p
		go p.run(ctx, rdb)
	}
	p.refs++
	p.heard = append(p.heard, l)
	var once sync.Once
	return func() { once.Do(func() { p.release(rdb, l) }) }
}

// release drops l; the last one stops the probe, waiting at most
// probeGrace for a PING in flight.
func (p *probe) release(rdb *redis.Client, l *probeListener) {
	probes.Lock()
	for i, h := range p.heard {
		if h == l {
			p.heard = append(p.heard[:i:i], p.heard[i+1:]...)
			break
		}
	}
	p.refs--
	last := p.refs == 0
	if last && probes.m[rdb] == p {
		delete(probes.m, rdb)
	}
	probes.Unlock()
	if last {
		p.stop()
		t := time.NewTimer(probeGrace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
		}
	}
}

// run PINGs rdb every probeEvery until ctx ends, and tells the first
// registered cache each answer's round trip. It skips a PING while a
// heartbeat of a cache on rdb runs (its answers teach the budget already,
// on a connection of its own) and when a step of rdb got a reply within
// the last probeEvery: a client in use follows its steps' replies, which
// teach the budget as much as a PING would. So a fleet spread thin pays
// a probe only for the periods in which a replica made no step, not one
// every period on top of its traffic (issue 38).
func (p *probe) run(ctx context.Context, rdb *redis.Client) {
	defer close(p.done)
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if p.busy() {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		start := time.Now()
		err := rdb.Ping(pctx).Err()
		rtt := time.Since(start)
		cancel()
		if err != nil {
			continue // a probe teaches nothing of silence: the steps' budgets judge that
		}
		probes.Lock()
		var heard func(time.Duration)
		if len(p.heard) > 0 {
			heard = p.heard[0].heard
		}
		probes.Unlock()
		if heard != nil {
			heard(rtt)
		}
	}
}

// busy reports whether the heartbeat of a cache on the probe's client
// runs, or a step of the client got a reply within the last probeEvery.
func (p *probe) busy() bool {
	probes.Lock()
	defer probes.Unlock()
	for _, l := range p.heard {
		if l.beating() || l.answered(probeEvery) {
			return true
		}
	}
	return false
}
