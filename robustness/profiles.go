package robustness

import (
	"maps"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// allRedisNemeses are the faults a single Redis deployment runs under.
var allRedisNemeses = []string{"redis-kill", "redis-pause", "partition", "reset", "latency", "pubsub-kill", "replica-pause", "replica-kill"}

// Profile returns the scenarios of a profile: "short" (CI: every path and
// every nemesis of a single Redis and of process-local mode, a few minutes)
// or "long" (by hand before a release: longer runs, and Cluster and
// Sentinel deployments).
func Profile(name string) []Scenario {
	d := 12 * time.Second
	if name == "long" {
		d = 60 * time.Second
	}
	traffic := Traffic{Keys: 6, Registers: 2, MaxSleep: 300 * time.Millisecond, Deadline: 2 * time.Second,
		Invalidations: true, Failures: true, Weights: DefaultWeights}
	// busy: waiters give up early, so BusyCompute, fallbacks, SoftTimeout
	// and stale-if-error are taken while Redis is healthy.
	busy := Scenario{Name: "redis-busy", Mode: "redis", Replicas: 3, Clients: 4, Duration: d, Traffic: traffic,
		Options: wire.Options{Namespace: "rb", TTL: 400 * time.Millisecond, Stale: 200 * time.Millisecond,
			StaleIfError: 2 * time.Second, FailSafeThrottle: 200 * time.Millisecond, SoftTimeout: 150 * time.Millisecond,
			ComputeTimeout: 250 * time.Millisecond, WaitTimeout: 100 * time.Millisecond, LeaseTTL: time.Second,
			PollInterval: 50 * time.Millisecond, BreakerCooldown: 300 * time.Millisecond},
		Nemeses: []string{"pubsub-kill", "reset", "latency", "replica-pause"}, FaultFor: 600 * time.Millisecond, Calm: 1500 * time.Millisecond}
	busy.Traffic.IgnoreContextEvery = 4
	// faults: waiters wait, so one compute per key per expiry is checked,
	// with L1 on, under every fault of a single Redis, data loss included.
	// Each replica runs a twin cache on its client in the same namespace:
	// the two share the pub/sub connection, the heartbeat and the
	// invalidation channel (issue 38), which every fault must leave as
	// safe as two processes' would be.
	faults := Scenario{Name: "redis-l1-faults", Mode: "redis", Replicas: 3, Clients: 4, Twin: true, Duration: d, Traffic: traffic,
		Options: wire.Options{Namespace: "rf", TTL: 500 * time.Millisecond, Stale: 300 * time.Millisecond,
			WaitTimeout: 3 * time.Second, LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond,
			BreakerCooldown: 300 * time.Millisecond, L1Size: 100, L1TTL: 300 * time.Millisecond, Beta: 1},
		Nemeses: allRedisNemeses, FaultFor: 800 * time.Millisecond, Calm: 1200 * time.Millisecond}
	// persist: the README's recommended client options, BusyError, a Redis
	// that keeps its data across kills.
	persist := Scenario{Name: "redis-persist-busyerror", Mode: "redis", Persistence: true, Recommended: true, Replicas: 3, Clients: 4,
		Duration: d, Traffic: traffic,
		Options: wire.Options{Namespace: "rp", TTL: 300 * time.Millisecond, StaleIfError: time.Second,
			WaitTimeout: 200 * time.Millisecond, BusyError: true, LeaseTTL: time.Second, BreakerCooldown: 300 * time.Millisecond,
			SlowCodec: true},
		Nemeses: []string{"redis-kill", "redis-kill-vanish", "vanish", "redis-pause", "partition", "replica-kill"}, FaultFor: 800 * time.Millisecond, Calm: 1500 * time.Millisecond,
		// Every run meets a Redis that refuses its connections, the fault
		// whose raw errors (EOF, refused) reach the callers of a path
		// that forgets to wrap them: its two faults drew none one run in
		// two (the get-raw-error plant); then, once the burst of calls
		// after that outage filled the pools, connections that die
		// without a word while Redis stays up (the dead-conn-not-retried
		// plant; 0 of 3 as the first fault, the pools still small).
		Openings: []string{"redis-kill", "vanish"}}
	// local: process-local mode, each replica its own store: the same
	// promises within each process.
	local := Scenario{Name: "local", Mode: "local", Replicas: 2, Clients: 6, Duration: d, Traffic: traffic,
		Options: wire.Options{Namespace: "lo", TTL: 300 * time.Millisecond, Stale: 200 * time.Millisecond,
			StaleIfError: time.Second, WaitTimeout: 3 * time.Second, SoftTimeout: 0, L1Size: 0}}
	// One batch compute in two fails, and ExpireTags comes four times as
	// often: a batch holds a value standing in for its failed compute
	// while it waits for a key another caller computes, and an ExpireTags
	// that returns meanwhile must refuse it (the batch-standin-unfenced
	// plant: 3 of 11 runs of this scenario catch it, 0 of 6 without).
	local.Traffic.BatchFailEvery = 2
	local.Traffic.Weights = withWeight(DefaultWeights, wire.OpExpireTags, 4*DefaultWeights[wire.OpExpireTags])
	// slow: slow fills, from a slow link between a replica and Redis most
	// of the time and a codec slow to encode large values (up to 128 ms):
	// the window in which callers join a load whose value an invalidation
	// elsewhere has made old since its last check.
	// A replica's subscriptions fall silent as it slows (its fence then
	// reads the marks, through the README's recommended client options,
	// which cut a read at its deadline on the socket).
	slow := Scenario{Name: "redis-slow-fill", Mode: "redis", Recommended: true, Replicas: 2, Clients: 6, Duration: d * 3 / 4, Traffic: traffic,
		Options: wire.Options{Namespace: "rs", TTL: 200 * time.Millisecond, WaitTimeout: 3 * time.Second,
			LeaseTTL: time.Second, BreakerCooldown: 300 * time.Millisecond, SlowCodec: true},
		Nemeses: []string{"latency", "latency-unsubscribed"}, FaultFor: 2 * time.Second, Calm: 200 * time.Millisecond}
	slow.Traffic.Keys, slow.Traffic.MaxSleep = 2, 50*time.Millisecond
	// overload: Redis slower than the budget for the whole fleet (issue
	// 30): one compute per key holds, no caller computes locally.
	// InvalidationWait is above the one-way delays (up to twice the
	// proxy's 175 ms): past that, the fence against computes in flight
	// holds only while Redis is as far from the invalidator as from the
	// answering replica (docs/how-it-works.md, "A Redis farther away than
	// δ"), which the proxy's jitter does not keep. The README's
	// recommended client options (ContextTimeoutEnabled): a step cut at
	// its deadline on the socket, which a loaded machine makes common,
	// must still read as load, never as an outage.
	overload := Scenario{Name: "redis-overload", Mode: "redis", Recommended: true, Replicas: 3, Clients: 4, Duration: d / 2, Traffic: traffic,
		Options: wire.Options{Namespace: "ro", TTL: 500 * time.Millisecond, Stale: 300 * time.Millisecond,
			WaitTimeout: 3 * time.Second, LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond,
			BreakerCooldown: 300 * time.Millisecond, InvalidationWait: 500 * time.Millisecond},
		Nemeses: []string{"overload"}, FaultFor: 2 * time.Second, Calm: time.Second}
	// Its calls are slow and few (a few hundred in a run): the joiners'
	// route gets a larger share, so that requests of different principals
	// still join one run there every run.
	overload.Traffic.Weights = withWeight(DefaultWeights, opJoin, 2*DefaultWeights[opJoin])
	// idle: one replica at a time left without traffic long enough for
	// its invalidation heartbeat to stop (it runs only while decisions
	// want it, issue 38), while the others write and invalidate; L1 on
	// and the default InvalidationWait, so that its first decisions after
	// the idle spell, L1's included, must read the marks again. Entries
	// outlive the idle spell (TTL above idleFor), so that what it held
	// before is what those decisions judge. Or one replica's traffic made
	// sparse (replica-sparse: an operation every 300 ms, over 2δ apart),
	// too seldom to start its heartbeat, which runs on the credit its
	// decisions grant: each decision is judged by marks read on its
	// request path, as on a Cluster.
	idle := Scenario{Name: "redis-idle", Mode: "redis", Replicas: 3, Clients: 4, Duration: d, Traffic: traffic,
		Options: wire.Options{Namespace: "ri", TTL: 8 * time.Second, Stale: time.Second,
			WaitTimeout: time.Second, LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond,
			BreakerCooldown: 300 * time.Millisecond, L1Size: 100, L1TTL: 8 * time.Second},
		Nemeses: []string{"replica-idle", "replica-sparse"}, FaultFor: time.Second, Calm: time.Second}
	// Abandoned keys where values stand in for a failing origin,
	// announcement rounds where L1 outlives the cross-replica window,
	// fence rounds where values are slow to encode, and revalidation
	// rounds on the route.
	busy.Traffic.Abandon, persist.Traffic.Abandon, local.Traffic.Abandon = true, true, true
	busy.Traffic.Revalidate = true
	idle.Traffic.Announce = true
	local.Traffic.StandIn = true
	slow.Traffic.Fence, slow.Traffic.Pause, persist.Traffic.Slow = true, true, true
	out := []Scenario{busy, faults, persist, local, slow, overload, idle}
	if name == "long" {
		cluster := faults
		cluster.Name, cluster.Mode, cluster.Options.Namespace = "cluster", "cluster", "rc"
		cluster.Nemeses = []string{"cluster-master", "replica-pause", "replica-kill"}
		cluster.FaultFor, cluster.Calm = 3*time.Second, 5*time.Second
		sentinel := faults
		sentinel.Name, sentinel.Mode, sentinel.Options.Namespace = "sentinel", "sentinel", "rs"
		sentinel.Nemeses = []string{"failover", "replica-pause"}
		sentinel.FaultFor, sentinel.Calm = 3*time.Second, 5*time.Second
		out = append(out, cluster, sentinel)
	}
	return out
}

// withWeight returns a copy of weights with op's weight w.
func withWeight(weights map[string]int, op string, w int) map[string]int {
	out := maps.Clone(weights)
	out[op] = w
	return out
}

// ScenarioNamed finds a scenario by name in the short profile, else the
// long one (the checker's rules do not depend on a run's duration).
func ScenarioNamed(name string) (Scenario, bool) {
	for _, p := range []string{"short", "long"} {
		for _, sc := range Profile(p) {
			if sc.Name == name {
				return sc, true
			}
		}
	}
	return Scenario{}, false
}
