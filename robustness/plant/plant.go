// Package plant is the robustness suite's planted bugs: each a small edit
// of the library's source that breaks one promise the way a real defect
// would (a fence skipped, a lease too short, a credential left out of a
// key). The harness (cmd/plant) applies one at a time to a copy of the
// repository and runs the short profile against it, so the suite's own
// mutation score is measured, not hoped for: a class of planted bug the
// checker misses is a gap in its traffic or its model.
//
// The edits live only here and in a temporary copy: no user's build, and no
// build of this repository, ever contains one.
package plant

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Bug is one planted bug: in File (relative to the repository's root),
// the text Old, which must occur exactly once, becomes New.
type Bug struct {
	Name string
	// Class says what promise it breaks, in the words of the docs.
	Class    string
	File     string
	Old, New string
	// Test is the robustness test that should catch it: TestRobustness (the
	// cache and the middleware; the default) or TestLockSet (the leases).
	Test string
	// Scenarios are the short profile's scenarios that caught it when it
	// was measured against the whole profile (RELIABILITY.md), or, for a
	// plant none caught, those whose conditions come closest to its
	// class's: the harness runs only these, stopping at the first that
	// fails. A run of them that catches it is a run of the whole profile
	// that would; one that does not may undercount. None: the whole
	// profile.
	Scenarios []string
}

// Bugs are the planted bugs, one per class.
var Bugs = []Bug{
	{
		Name:      "invalidate-no-wait",
		Class:     "InvalidateTags returns before every replica's trust in an older mark has ended (no δ wait)",
		File:      "cache/invalidate.go",
		Old:       "t := time.NewTimer(c.opts.InvalidationWait)",
		New:       "t := time.NewTimer(0)",
		Scenarios: []string{"redis-l1-faults", "redis-slow-fill"},
	},
	{
		Name:      "lease-ttl-seconds",
		Class:     "the recompute lease's TTL sent in seconds where Redis reads milliseconds (a 1 ms lease): one compute per key",
		File:      "cache/internal/redisstore/fill.go",
		Old:       "ttl := max(s.cfg.LeaseTTL.Milliseconds(), 1)",
		New:       "ttl := max(int64(s.cfg.LeaseTTL.Seconds()), 1)",
		Scenarios: []string{"redis-busy", "redis-l1-faults", "redis-slow-fill", "redis-overload"},
	},
	{
		Name:      "http-credential-unkeyed",
		Class:     "the shared HTTP cache keys no credential: one user's response answers another",
		File:      "middleware/admit.go",
		Old:       "if o.CacheAuthorized {",
		New:       "if o.CacheAuthorized && false {",
		Scenarios: []string{"redis-busy"},
	},
	{
		Name:      "http-forwarding-unkeyed",
		Class:     "the shared HTTP cache keys no forwarding header: a poisoned entry answers everyone",
		File:      "middleware/key.go",
		Old:       "for _, name := range forwardingHeaders {",
		New:       "for _, name := range forwardingHeaders[:0] {",
		Scenarios: []string{"redis-busy"},
	},
	{
		Name:      "http-joiner-unselected",
		Class:     "a response that is not stored answers every request that joined its run, whatever it varies on",
		File:      "middleware/store.go",
		Old:       "return n.shared != nil && o.Key(kr, n.vary) == n.selection",
		New:       "return n.shared != nil",
		Scenarios: []string{"redis-busy", "local"},
	},
	{
		Name:      "http-joiners-each-run",
		Class:     "requests of one variant that joined a run whose unstored response did not select them each run the handler for themselves",
		File:      "middleware/cache.go",
		Old:       "if next := f.regroup(kr, ns); next != nil {",
		New:       "if next := f.regroup(kr, ns); next != nil && false {",
		Scenarios: []string{"redis-l1-faults", "local", "redis-overload"},
	},
	{
		Name:      "delete-keeps-lease",
		Class:     "Delete leaves the recompute lease, so a compute in flight stores its outdated value after the Delete returned",
		File:      "cache/internal/scripts/delete.lua",
		Old:       "redis.call('DEL', KEYS[2])",
		New:       "-- planted: the lease stays",
		Scenarios: []string{"redis-busy"},
	},
	{
		Name:      "get-raw-error",
		Class:     "Get returns go-redis' raw error, not a documented one",
		File:      "cache/direct.go",
		Old:       "e, found, err := c.store.read(ctx, hitKeys(key), readShared)\n\tif err != nil {\n\t\treturn v, false, fmt.Errorf(\"cache: get %q: %w\", key, storeFailed(ctx, err))",
		New:       "e, found, err := c.store.read(ctx, hitKeys(key), readShared)\n\tif err != nil {\n\t\treturn v, false, err",
		Scenarios: []string{"redis-persist-busyerror"},
	},
	{
		Name:      "ttl-doubled",
		Class:     "an entry is written fresh for twice its TTL: a value answers as fresh past its TTL",
		File:      "stale/stale.go",
		Old:       "fresh := now.Add(ttl)",
		New:       "fresh := now.Add(2 * ttl)",
		Scenarios: []string{"redis-busy", "redis-l1-faults", "local"},
	},
	{
		Name:      "ttl-halved",
		Class:     "an entry is written fresh for half its TTL: a fresh stored value is computed again instead of served",
		File:      "stale/stale.go",
		Old:       "fresh := now.Add(ttl)",
		New:       "fresh := now.Add(ttl / 2)",
		Scenarios: []string{"redis-busy", "local", "redis-slow-fill", "redis-overload"},
	},
	{
		Name:      "error-window-x4",
		Class:     "an entry is kept for stale-if-error four times too long: a value answers past TTL + max(Stale, StaleIfError)",
		File:      "stale/stale.go",
		Old:       "errorUntil := fresh.Add(max(p.Stale, p.StaleIfError))",
		New:       "errorUntil := fresh.Add(4 * max(p.Stale, p.StaleIfError))",
		Scenarios: []string{"redis-busy", "redis-persist-busyerror", "local"},
	},
	{
		Name:      "fence-skipped-at-answer",
		Class:     "a single key's answer skips the invalidation fence when it reaches its caller: a compute in flight across InvalidateTags answers its old value",
		File:      "cache/fetch.go",
		Old:       "\t\tif !c.servable(ctx, r, err) {",
		New:       "\t\tif false && !c.servable(ctx, r, err) {",
		Scenarios: []string{"redis-slow-fill"},
	},
	{
		Name:      "marks-read-impatient",
		Class:     "the invalidation marks' read is cut at its caller's deadline on the socket, so a Redis that turned slow within InvalidationWait teaches the budget nothing and the fence lets a value through unchecked (issue 39 item 2)",
		File:      "cache/internal/redisstore/marks.go",
		Old:       "cmds, err := redisstep.RunPatient(ctx, s.budget,",
		New:       "cmds, err := redisstep.Run(ctx, s.budget,",
		Scenarios: []string{"redis-persist-busyerror"}, // its slowing rounds: a fence reading the marks from a Redis that just turned slow for them
	},
	{
		Name:      "fence-gives-up-under-load",
		Class:     "an answer's fence gives up after two reads' bounds although its reads failed for load (this process starved of CPU, or Redis answering its other steps), and lets a value computed before a returned InvalidateTags through unchecked (issue 39 item 10)",
		File:      "cache/internal/marks/check.go",
		Old:       "func (m *Marks) readsOnUnderLoad(sent int64) bool {\n",
		New:       "func (m *Marks) readsOnUnderLoad(sent int64) bool {\n\tif sent != 0 {\n\t\treturn false\n\t}\n",
		Scenarios: []string{"redis-slow-fill"}, // its pausing rounds: a replica paused while its fence reads the marks
	},
	{
		Name:      "batch-no-wait",
		Class:     "a batch computes a key another replica holds the lease of, instead of waiting for it: one compute per key",
		File:      "cache/batch.go",
		Old:       "\t\tcase cl.won:\n\t\t\ttasks = append(",
		New:       "\t\tcase cl.won || cl.err == nil:\n\t\t\ttasks = append(",
		Scenarios: []string{"redis-l1-faults", "redis-persist-busyerror", "local", "redis-overload", "redis-idle"},
	},
	{
		Name:      "batch-standin-unfenced",
		Class:     "a batch hands back a value standing in for its failed compute although an ExpireTags returned after that compute failed, while the batch waited for another key",
		File:      "cache/batch.go",
		Old:       "if st == marks.Valid && a.standIn && a.err == nil",
		New:       "if false && st == marks.Valid && a.standIn && a.err == nil",
		Scenarios: []string{"local"},
	},
	{
		Name:      "compute-timeout-as-context-error",
		Class:     "callers released by a compute past ComputeTimeout get a bare context error while their own contexts are alive",
		File:      "cache/compute.go",
		Old:       "errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {\n\t\t// The compute's own bound",
		New:       "false {\n\t\t// The compute's own bound",
		Scenarios: []string{"redis-busy"},
	},
	{
		Name:      "l1-ignores-announcements",
		Class:     "L1 keeps a value another replica replaced when the write's announcement arrives: stale reads until L1TTL",
		File:      "cache/l1_track.go",
		Old:       "\tc.l1.heard(key, keep, c.now())\n",
		New:       "\t_ = keep\n",
		Scenarios: []string{"redis-idle"},
	},
	{
		Name:      "l1-put-untracked",
		Class:     "L1 takes a value before it hears the key's writes (no subscription to the key's channel confirmed): a later write never drops it, stale reads until L1TTL",
		File:      "cache/cache.go",
		Old:       "!c.synced.Load() || !c.l1open(key) {",
		New:       "!c.synced.Load() {",
		Scenarios: []string{"redis-idle", "redis-l1-faults"},
	},
	{
		Name:      "l1-announced-past-own-write",
		Class:     "L1 takes the value an announcement carried from a read older than this replica's own Delete or Set that returned before the announcement came: the replica serves a value its own write replaced",
		File:      "cache/l1.go",
		Old:       "version >= old.Floor && floor.Load() <= old.Tick && version >= c.cleared.Load()",
		New:       "version >= c.cleared.Load()",
		Scenarios: []string{"redis-idle"}, // the announcement rounds: L1 that outlives the cross-replica window
	},
	{
		Name:      "shared-channel-one-handler",
		Class:     "of the caches of one client listening on one invalidation channel, only one hears it while the client's one heartbeat vouches for all: invalidations missed",
		File:      "cache/internal/notify/conn.go",
		Old:       "\t\tfor _, fn := range fns {\n\t\t\tfn(payload)\n\t\t}\n",
		New:       "\t\tfor _, fn := range fns[:1] {\n\t\t\tfn(payload)\n\t\t}\n",
		Scenarios: []string{"redis-l1-faults"},
	},
	{
		Name:      "step-hides-its-cut",
		Class:     "a claim or fill cut at its budget passes as answered, and its raw timeout is taken for an outage: callers compute locally while Redis merely slows",
		File:      "cache/internal/redisstep/budget.go",
		Old:       "func NoReply(err error) bool { return err != nil && !isReply(err) }",
		New:       "func NoReply(err error) bool { return BrokenConn(err) }",
		Scenarios: []string{"redis-overload"}, // a step past its budget on the recommended client options
	},
	{
		Name:  "refused-dial-waits-budget",
		Class: "a refused dial does not end the step that waits for it: while Redis refuses connections, each call waits out its budget",
		File:  "cache/internal/redisstep/dial.go",
		Old:   "if !e.Ended() || h.repliedSince(start) {",
		New:   "if true {",
		// redis-kill refuses connections (refusedOutageCost).
		Scenarios: []string{"redis-persist-busyerror"},
	},
	{
		Name:      "probe-waits-past-refusal",
		Class:     "the breaker's probe does not end at a refused dial: the call that finds the cooldown over waits out a budget for its verdict while Redis refuses connections",
		File:      "cache/internal/redisstep/budget.go",
		Old:       "\t\te = b.h.epoch.Load()\n\t\tdialEnded = e.Done()\n",
		New:       "\t\te = b.h.epoch.Load()\n",
		Scenarios: []string{"redis-persist-busyerror"},
	},
	{
		Name:  "dead-conn-not-retried",
		Class: "a step that meets a pooled connection that died without a word fails, rather than run again on another: after connections vanish, calls answer degraded while Redis is up",
		File:  "cache/internal/redisstep/budget.go",
		Old:   "if !BrokenConn(err) || b.idle == nil {",
		New:   "if true {",
		// the vanish nemesis (connections dead, Redis up).
		Scenarios: []string{"redis-persist-busyerror"},
	},
	{
		Name:  "http-304-drops-surrogate-keys",
		Class: "a stored response revalidated by a 304 loses its surrogate keys: a purge by one of them no longer reaches it",
		File:  "middleware/storage.go",
		Old:   "\tout.Header.Del(\"Date\")\n",
		New:   "\tout.Header.Del(\"Date\")\n\tout.Header.Del(\"Surrogate-Key\")\n",
		// The revalidation rounds (rounds.go) make the class show there.
		Scenarios: []string{"redis-busy"},
	},
	{
		Name:  "quorum-majority-off-by-one",
		Class: "the quorum lease granted by half the servers, not a majority: two holders at once",
		File:  "lease/quorum.go",
		Old:   "func (q *Quorum) Majority() int { return len(q.servers)/2 + 1 }",
		New:   "func (q *Quorum) Majority() int { return len(q.servers) / 2 }",
		Test:  "TestLockSet",
	},
}

// Named returns the planted bug called name.
func Named(name string) (Bug, bool) {
	for _, b := range Bugs {
		if b.Name == name {
			return b, true
		}
	}
	return Bug{}, false
}

// Apply plants b in the repository at root: it rewrites b.File there. It
// fails, changing nothing, unless b.Old occurs exactly once.
func (b Bug) Apply(root string) error {
	path := filepath.Join(root, filepath.FromSlash(b.File))
	src, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("plant %s: %w", b.Name, err)
	}
	if n := strings.Count(string(src), b.Old); n != 1 {
		return fmt.Errorf("plant %s: %q occurs %d times in %s, want once (the code moved: update the plant)", b.Name, b.Old, n, b.File)
	}
	return os.WriteFile(path, []byte(strings.Replace(string(src), b.Old, b.New, 1)), 0o644)
}
