// Package robustness checks the cache's documented guarantees the way etcd's
// tests/robustness and Jepsen check theirs: random traffic through every
// public path, several replicas as separate processes, injected faults, and
// the recorded history checked against a model of what the README promises.
//
// The pipeline, one file a stage:
//
//   - replica/ is the replica program: its own go-redis client and
//     cache.Cache, driven over its standard input and output (wire/), so it
//     can be killed (SIGKILL) and paused (SIGSTOP) mid-compute; replica.go
//     starts and drives it. With Scenario.Twin it runs a second cache on
//     the same client and namespace (rN.twin in the history), which shares
//     the first one's pub/sub connection, heartbeat and invalidation
//     channel; the checker judges it as a replica of its own, under its
//     process's faults (wire.Process).
//   - origin.go is the source of truth, a versioned register per key served
//     over loopback HTTP: every compute reads a key's version and is stamped
//     with an ID and its begin and end, so every answer names the compute
//     that made it.
//   - traffic.go draws random operations over a small key space through
//     every path: GetOrCompute, Fetch, FetchWithFallback, GetOrComputeMany,
//     Get, Set with options, Delete, Expire, InvalidateTags, ExpireTags,
//     Clear, and the middleware (replica/http.go: a chi route cached by
//     middleware.Cache, with ETags it revalidates, its responses tagged
//     with surrogate keys and purged by them; requests of several
//     principals, and a URL whose responses are never stored, so that
//     requests of different principals join one handler run), with
//     computes that are slow, fail, panic, tag, set a TTL, answer
//     "unchanged" or return a large value.
//   - rounds.go runs scripted rounds next to the random traffic, on keys of
//     their own, for breaches the traffic meets only by chance because it
//     writes, invalidates and clears every key several times a second: a
//     key written with a short TTL and left alone past TTL + max(Stale,
//     StaleIfError), then read with a failing compute (no stored value may
//     answer it); a key one replica writes twice while the others read it
//     into L1, read again past the cross-replica window; a quiet replica
//     whose marks reads turn slow (slowing rounds), or whose process is
//     stopped at its answer's fence (pausing rounds, recorded as a stall),
//     while another replica's InvalidateTags returns. A round holds a
//     Clear gate (a Clear drawn meanwhile becomes an InvalidateTags of
//     every tag group). At each fault that makes Redis fail, every replica
//     sends Gets one after another until its breaker opens: the calls that
//     reach a killed Redis must still fail with documented errors.
//   - nemesis.go injects one fault at a time and heals it: Redis killed
//     (with and without persistence), paused, one replica partitioned, its
//     connections reset or delayed, pub/sub connections killed, a replica
//     paused or killed, a Sentinel failover, a Cluster master killed; and
//     one that is no fault, a replica left without traffic until its
//     invalidation heartbeat stops.
//   - history.go records every operation's invoke and return, inputs and
//     outputs, every compute and every fault on one clock.
//   - checker.go (with a property or two in each checker_*.go) and
//     linearizable.go are the README's promises as code: the invalidation
//     and write fences, documented errors only, deadlines kept, stored
//     values never going back, values answered only within the windows
//     they were written with (TTL, then Stale or StaleIfError), one compute
//     per key at a time while Redis is healthy, a route response answering
//     only the principal it was made for, and linearizable registers
//     (porcupine).
//   - profiles.go holds the scenarios: deployment, options, traffic, faults.
//
// Run the short profile (CI) with go test -C robustness .; the long one with
// go test -C robustness . -timeout 30m -robustness.profile=long. A failing run
// saves its history, violations and, for a register, porcupine's picture,
// and prints the seed that replays its traffic and faults.
package robustness
