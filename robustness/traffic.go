package robustness

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// Traffic draws random operations over a small key space, through every
// public path of cache.Cache and the middleware. Compute keys ("k0"…) are
// read through the compute paths and written by Set, Delete and the
// invalidations (but the calm key, calmKey, which only reads and Clear
// reach); register keys ("r0"…) only by Set, Delete, Get and Clear,
// so that their history is a register's, for the linearizability check;
// route keys ("h0"…) are the middleware's: GET through the cached route
// (its response tagged with the route's surrogate keys), POST to
// invalidate it, PURGE by surrogate key; and the joiners' route key
// ("hj"), whose responses are never stored (see opJoin). The window
// rounds' keys ("ka", "kl", "kg": rounds.go) are no part of its draws.
type Traffic struct {
	// Keys and Registers are the sizes of the two key spaces.
	Keys, Registers int
	// MaxSleep bounds a compute's duration.
	MaxSleep time.Duration
	// Deadline is the callers' deadline (each call draws up to it).
	Deadline time.Duration
	// Invalidations turns on InvalidateTags, ExpireTags, Clear and the
	// middleware's purge by surrogate key.
	Invalidations bool
	// Failures turns on computes that fail or panic.
	Failures bool
	// BatchFailEvery, when above 0, makes one GetOrComputeMany compute in
	// BatchFailEvery fail (with Failures' share on top): batches that hold
	// values standing in for their failed compute while they wait for
	// their other keys, across invalidations. 0 draws nothing more, so
	// the scenarios that leave it out replay their seeds as before.
	BatchFailEvery int
	// IgnoreContextEvery, when above 0, makes one compute of the cache's
	// calls in IgnoreContextEvery ignore its context (wire.Compute): one
	// slower than ComputeTimeout is abandoned, and its callers must be
	// told so (cache.ErrComputeTimeout), not handed a bare context error.
	// 0 draws nothing more, so the scenarios that leave it out replay
	// their seeds as before.
	IgnoreContextEvery int
	// Abandon runs abandoned-key rounds next to the traffic (rounds.go): a
	// key written with a short TTL, left alone past TTL + max(Stale,
	// StaleIfError), then read with a compute that fails, which no stored
	// value may answer any more. The random traffic never leaves a key
	// alone that long. Only with StaleIfError.
	Abandon bool
	// Announce runs announcement rounds next to the traffic (rounds.go):
	// a key one replica writes twice and the others read, into their L1,
	// and read again past the cross-replica window. Only with L1.
	Announce bool
	// StandIn runs stand-in rounds next to the traffic (rounds.go): a
	// batch whose compute fails for a key with a value kept for errors,
	// while it waits for a key another call computes, across an
	// ExpireTags of that value's tags. Only with StaleIfError.
	StandIn bool
	// Fence runs fence rounds next to the traffic (rounds.go): a compute
	// whose value is slow to encode, across an InvalidateTags of its tag
	// on another replica that returns while the value is being stored,
	// after the compute's own check. Only with a slow codec.
	Fence bool
	// Slow runs slowing rounds next to the traffic (rounds.go): one
	// replica, kept quiet with its subscriptions silent, computes a
	// tagged value, and its marks reads turn slow within δ one way while
	// another replica's InvalidateTags returns before the value is
	// stored. Only in Redis mode, with a slow codec and several replicas.
	Slow bool
	// Pause runs pausing rounds next to the traffic (rounds.go): one
	// replica's process paused while its answer's fence reads the marks
	// (issue 39 item 10's class: a starved process).
	Pause bool
	// Revalidate runs revalidation rounds next to the traffic (rounds.go):
	// a route response stored with a surrogate key, revalidated by a 304
	// once past its freshness, then purged by that key and requested
	// again. Only with StaleIfError (it keeps the expired response to
	// revalidate).
	Revalidate bool
	// Weights of each operation; a zero weight leaves it out.
	Weights map[string]int
}

// DefaultWeights is the mix of operations a run draws from.
var DefaultWeights = map[string]int{
	wire.OpGetOrCompute:      20,
	wire.OpFetch:             20,
	wire.OpFetchWithFallback: 8,
	wire.OpGetOrComputeMany:  8,
	wire.OpGet:               12,
	wire.OpSet:               6,
	wire.OpDelete:            4,
	wire.OpExpire:            2,
	wire.OpInvalidateTags:    4,
	wire.OpExpireTags:        2,
	wire.OpClear:             2,
	opUpdate:                 4,
	wire.OpHTTPGet:           8,
	wire.OpHTTPPost:          2,
	wire.OpHTTPPurge:         2,
	opJoin:                   6,
}

// opUpdate is a user's write: the origin's version moves on, then the key's
// group tag is invalidated (InvalidateTags), as an application does after
// writing its database.
const opUpdate = "update"

// opJoin is a GET of the joiners' route key, joinKey: its every response
// is stale on arrival (max-age=0) and untagged, so the middleware stores
// none, and the URL never gets the marker that would send requests of
// different principals to variant keys of their own. Concurrent requests
// on one replica, whoever they are, join one handler run, and its
// response may answer only the joiners its own request selects (RFC 9111
// §4.1: the same credential and language cookie); the other joiners
// regroup, one run per variant (docs/http.md). Half of them come with a
// second request of the same principal at once (run.client), so that two
// joiners of one variant are common. The compute is slow enough for the
// requests of the replica's other clients to arrive while it runs.
const opJoin = "http-join"

// joinKey is the joiners' route key (the URL /v/hj).
const joinKey = "hj"

// groups is how many tag groups the compute keys fall into: key ki carries
// tag "g<i%groups>".
const groups = 3

func keyTags(i int) []string { return []string{fmt.Sprintf("g%d", i%groups)} }

// routeGroups is how many surrogate-key groups the route keys fall into:
// route key hi's response is tagged "route-hi" and "rg<i%routeGroups>".
const routeGroups = 2

// routeKeys returns the surrogate keys of route key hi's responses.
func routeKeys(i int) []string {
	return []string{fmt.Sprintf("route-h%d", i), fmt.Sprintf("rg%d", i%routeGroups)}
}

// principals are who an HTTP request is (wire.HTTPKey): anonymous most
// often, a credential (the route caches per credential), a language cookie
// (the route varies on it), both, a session cookie (the request passes by
// the cache), a forwarded host (keyed: it must poison no other entry).
var principals = []string{"", "", "", "auth=alice", "auth=bob", "lang=fr", "auth=alice;lang=en", "session=alice", "host=evil.example"}

// joinPrincipals are who a request of the joiners' route is: the
// principals that share its URL's key, those the cache tells apart only
// by the headers a response varies on (a session cookie passes by the
// cache, a forwarded host is keyed), each as often.
var joinPrincipals = []string{"", "auth=alice", "auth=bob", "lang=fr", "auth=alice;lang=en"}

// calmKey is a compute key that only reads reach (GetOrCompute, Fetch,
// FetchWithFallback), computed untagged: no Set, Delete, expiry or tag
// invalidation writes it, only Clear. Between Clears its values live out
// their TTL, where every other key is written several times a second, so
// that the property "a fresh stored value is served, not recomputed"
// (checker_served.go) has stretches to judge.
const calmKey = "kc"

// next draws one operation.
func (t *Traffic) next(rng *rand.Rand, id int64) (req wire.Request, update bool) {
	total := 0
	for _, w := range t.Weights {
		total += w
	}
	n := rng.IntN(total)
	op := ""
	for _, name := range opOrder {
		if n < t.Weights[name] {
			op = name
			break
		}
		n -= t.Weights[name]
	}
	req = wire.Request{ID: id, Op: op, Deadline: t.Deadline/2 + time.Duration(rng.Int64N(int64(t.Deadline/2)+1))}
	ki := rng.IntN(t.Keys)
	req.Key = fmt.Sprintf("k%d", ki)
	req.Compute = t.compute(rng, ki)
	if t.IgnoreContextEvery > 0 && rng.IntN(t.IgnoreContextEvery) == 0 && !strings.HasPrefix(op, "http-") {
		req.Compute.IgnoreContext = true
	}
	switch op {
	case wire.OpGetOrComputeMany:
		req.Key = ""
		seen := map[int]bool{}
		for range 1 + rng.IntN(3) {
			k := rng.IntN(t.Keys)
			if !seen[k] {
				seen[k] = true
				req.Keys = append(req.Keys, fmt.Sprintf("k%d", k))
			}
		}
		req.Compute.Tags = keyTags(rng.IntN(groups)) // one call's tags apply to all its keys
		req.Compute.Unchanged = false                // ErrUnchanged answers for every key of a batch
		if t.BatchFailEvery > 0 && rng.IntN(t.BatchFailEvery) == 0 {
			req.Compute.Fail, req.Compute.Panic, req.Compute.NotFound = true, false, false
		}
	case wire.OpGet, wire.OpSet, wire.OpDelete:
		if rng.IntN(2) == 0 {
			req.Key = fmt.Sprintf("r%d", rng.IntN(t.Registers))
		}
		if op == wire.OpSet {
			if req.Key[0] == 'r' {
				req.SetTTL = time.Hour // a register's values do not expire within a run
			} else {
				req.Tags = keyTags(ki)
				if rng.IntN(3) == 0 {
					req.SetTTL = time.Duration(200+rng.IntN(800)) * time.Millisecond
				}
				if rng.IntN(3) == 0 {
					req.SetStale = time.Duration(100+rng.IntN(500)) * time.Millisecond
				}
			}
		}
	case wire.OpGetOrCompute, wire.OpFetch, wire.OpFetchWithFallback:
		if rng.IntN(6) == 0 {
			req.Key, req.Compute.Tags = calmKey, nil
		}
	case wire.OpInvalidateTags, wire.OpExpireTags:
		req.Key = ""
		for _, g := range rng.Perm(groups)[:1+rng.IntN(2)] {
			req.Tags = append(req.Tags, fmt.Sprintf("g%d", g))
		}
	case opUpdate:
		req.Op = wire.OpInvalidateTags
		req.Tags = keyTags(ki)
		update = true
	case wire.OpClear:
		req.Key = ""
	case wire.OpHTTPGet, wire.OpHTTPPost:
		// The middleware's own cache (another namespace): keys "h0"…,
		// each with the principal the request carries (wire.HTTPKey): the
		// route's responses are made for it, and must reach no request
		// of another principal.
		hi := ki % max(t.Keys/2, 1)
		req.Key = fmt.Sprintf("h%d|%s", hi, principals[rng.IntN(len(principals))])
		req.Noise = rng.IntN(3) == 0
		if op == wire.OpHTTPGet {
			req.Tags = routeKeys(hi)
		}
	case opJoin:
		req.Op = wire.OpHTTPGet
		req.Key = joinKey + "|" + joinPrincipals[rng.IntN(len(joinPrincipals))]
		req.Noise = rng.IntN(3) == 0
		// Stale on arrival (any TTL: the route answers max-age=0), no
		// surrogate keys (a tagged response that is not stored answers
		// only its own request), a run long enough to be joined.
		req.Compute.TTL = time.Second
		req.Compute.Sleep = t.MaxSleep/4 + time.Duration(rng.Int64N(int64(t.MaxSleep/4)+1))
	case wire.OpHTTPPurge:
		// One route's own key, or a group's: every route response tagged
		// with it, on every replica.
		req.Key = ""
		keys := routeKeys(ki % max(t.Keys/2, 1))
		req.Tags = keys[rng.IntN(len(keys)):][:1]
	}
	if (req.Op == wire.OpInvalidateTags || req.Op == wire.OpExpireTags) && rng.IntN(20) == 0 {
		// More tags than an entry may carry: the call takes any number.
		for i := range 40 {
			req.Tags = append(req.Tags, fmt.Sprintf("x%d", i))
		}
	}
	if !t.Invalidations && (req.Op == wire.OpInvalidateTags || req.Op == wire.OpExpireTags || req.Op == wire.OpClear || req.Op == wire.OpHTTPPurge) {
		req.Op, req.Tags, req.Key, update = wire.OpGetOrCompute, nil, fmt.Sprintf("k%d", ki), false
	}
	return req, update
}

// opOrder fixes the order weights are drawn in (map order is random).
var opOrder = []string{wire.OpGetOrCompute, wire.OpFetch, wire.OpFetchWithFallback, wire.OpGetOrComputeMany,
	wire.OpGet, wire.OpSet, wire.OpDelete, wire.OpExpire, wire.OpInvalidateTags, wire.OpExpireTags, wire.OpClear, opUpdate,
	wire.OpHTTPGet, wire.OpHTTPPost, wire.OpHTTPPurge, opJoin}

// compute draws how the call's compute function behaves.
func (t *Traffic) compute(rng *rand.Rand, ki int) wire.Compute {
	c := wire.Compute{Tags: keyTags(ki)}
	if t.MaxSleep > 0 {
		// Most computes are quick; some are slow enough to outlast
		// WaitTimeout or SoftTimeout and to overlap invalidations.
		if rng.IntN(4) == 0 {
			c.Sleep = time.Duration(rng.Int64N(int64(t.MaxSleep)))
		} else {
			c.Sleep = time.Duration(rng.Int64N(int64(t.MaxSleep / 10)))
		}
	}
	if t.Failures {
		switch rng.IntN(40) {
		case 0, 1, 2:
			c.Fail = true
		case 3:
			c.Panic = true
		case 4:
			c.NotFound = true
		}
	}
	if rng.IntN(8) == 0 {
		c.Pad = (64 + rng.IntN(192)) << 10
	}
	c.Unchanged = rng.IntN(3) == 0
	if rng.IntN(5) == 0 {
		c.TTL = time.Duration(100+rng.IntN(900)) * time.Millisecond
	}
	c.FallbackFails = rng.IntN(5) == 0
	return c
}
