package robustness

// The properties of computes: one compute per key at a time across the
// fleet while Redis is healthy or only slow, and no degraded answer while
// it is only slow.

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// oneCompute says whether the run can promise one compute per key at a
// time across the fleet: no waiter gives up on a healthy holder (WaitTimeout
// exceeds every compute), so BusyCompute never runs while Redis is healthy.
func (sc Scenario) oneCompute() bool {
	return sc.Options.WaitTimeout > sc.Traffic.MaxSleep+time.Second && sc.Options.SoftTimeout == 0
}

// noDegradedUnderOverload: a slow Redis is not a down one (issue 30): no
// call answers degraded (computed locally) while Redis is only slow, from
// the overload's injection to its heal and settle; but for a call that
// began within the overload's first round trip (overloadOnset).
func (c *checker) noDegradedUnderOverload() {
	for _, a := range c.answers() {
		if a.outcome == "degraded" && c.overloaded(a.op.Invoke, a.op.Return) && !c.overloadOnset(a.op.Invoke) {
			c.fail("no degraded under overload", []*Op{a.op}, "%s answered degraded (#%d [%s, %s]) while Redis was slow, not down",
				a.key, a.op.Req.ID, ms(a.op.Invoke), ms(a.op.Return))
		}
	}
}

// overloadOnset reports whether t lies within the first round trip of an
// overload (its injection, less stampSlack, to twice its delay each way
// after it): a step sent then hears no reply at the new round trip within
// its budget, RedisTimeout, which the overload exceeds, and a replica with
// no step in flight as the overload began hears none at all; the budget
// cannot tell that silence from an outage until a first reply shows the
// new round trip (docs/operating.md: the first steps after Redis turns
// slower than RedisTimeout degrade their callers once).
func (c *checker) overloadOnset(t time.Duration) bool {
	for _, f := range c.faults {
		n := eachWay.FindStringSubmatch(f.what)
		if !strings.HasPrefix(f.what, "overload") || n == nil {
			continue
		}
		ms, _ := strconv.Atoi(n[1])
		if f.from-stampSlack <= t && t < f.from+2*time.Duration(ms)*time.Millisecond {
			return true
		}
	}
	return false
}

// noDegradedWhileReachable: a call answers Degraded (computed without the
// fleet) only when its replica may not reach Redis: a fault that cuts it
// off, or one that settles still (the breaker's cooldown, a lease
// outliving the fault), overlaps the call. A Redis that healed long ago,
// or one that is merely slower, degrades no one (issue 39 items 4 and 10).
func (c *checker) noDegradedWhileReachable() {
	for _, a := range c.answers() {
		if a.outcome == "degraded" && !c.unreachable(a.op.Replica, a.op.Invoke, a.op.Return) {
			c.fail("no degraded while reachable", []*Op{a.op}, "%s answered degraded (#%d on %s [%s, %s]) with no fault keeping its replica from Redis",
				a.key, a.op.Req.ID, a.op.Replica, ms(a.op.Invoke), ms(a.op.Return))
		}
	}
}

// oneCompute: while Redis is healthy, and while it is only slow (the
// overload nemesis), one compute per key at a time across the fleet: two
// computes of a key never overlap, unless a write of the key (Set, Delete,
// an invalidation) took the first one's lease away meanwhile.
func (c *checker) oneCompute() {
	degraded := map[string]bool{}
	for _, a := range c.answers() {
		if a.outcome == "degraded" {
			degraded[a.v.ID] = true
		}
	}
	byKey := map[string][]*Compute{}
	for _, cp := range c.h.Computes {
		if o := c.byReq[cp.Req]; o != nil && o.Resp.Outcome == "bypass" && !c.joinerBypass(o) {
			continue // a request that passes by the cache runs the handler of its own (docs/http.md)
		}
		k := cp.Key
		if c.sc.Mode == "local" {
			k = cp.Replica + "\x00" + k
		}
		byKey[k] = append(byKey[k], cp)
	}
	for _, cps := range byKey {
		for i, a := range cps {
			for _, b := range cps[i+1:] {
				aEnd, bEnd := a.Ended, b.Ended
				if aEnd == 0 || bEnd == 0 || a.Began > bEnd || b.Began > aEnd {
					continue
				}
				// A write taking the lease away may have come before the
				// first compute of the call's claim: look from the calls'
				// invokes.
				from := min(a.Began, b.Began, c.invoked(a.Req), c.invoked(b.Req))
				// A degraded compute (Redis down) excuses the overlap, but
				// not under overload: a slow Redis is not a down one.
				c.cov.Overlaps++
				excused := (degraded[a.ID] || degraded[b.ID]) && !c.overloaded(from, max(aEnd, bEnd))
				// The run of a variant's requests that a joined run did not
				// select, beside a run its URL's next request began: the
				// middleware's two keys (docs/http.md). Two such runs of
				// one variant never overlap, nor two runs on the URL's key.
				excused = excused || (c.regroupedRun(a) && !c.surelyRegrouped(b) || c.regroupedRun(b) && !c.surelyRegrouped(a)) && !c.joinedAlike(a, b)
				// A compute that ignored its context past ComputeTimeout
				// was abandoned: its callers were released and its lease
				// given up, and the key's next compute may run while it
				// finishes (docs/guarantees.md).
				excused = excused || c.abandonedBefore(a, b) || c.abandonedBefore(b, a)
				// Nothing writes the joiners' route: its responses are not
				// stored, untagged, and no unsafe request is sent to it.
				route, _ := wire.HTTPKey(a.Key)
				if excused || c.broken(a.Replica, b.Replica, from, max(aEnd, bEnd)) ||
					route != joinKey && c.writeDuring(a.Key, c.computeTags(a, b), from, max(aEnd, bEnd)) {
					c.cov.Excused++
					continue
				}
				c.fail("one compute", nil, "%s computed twice at once: %s on %s for #%d [%s, %s] and %s on %s for #%d [%s, %s]",
					a.Key, a.ID, a.Replica, a.Req, ms(a.Began), ms(aEnd), b.ID, b.Replica, b.Req, ms(b.Began), ms(bEnd))
			}
		}
	}
}

// broken reports whether a fault that may break one compute per key for
// replicas a and b overlapped [from, to]: Redis killed, paused, failed
// over or its Cluster master killed (every replica), or a or b itself
// partitioned from Redis, its connections reset, paused or killed. A
// slow Redis (latency, overload), a killed subscription (waiters still
// poll the lease) and a fault on a third replica excuse nothing: one
// compute per key holds through them.
func (c *checker) broken(a, b string, from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.from > to || from > f.to {
			continue
		}
		kind, _, _ := strings.Cut(f.what, ":")
		if breaksOneCompute(kind) && (f.replica == "" || f.replica == wire.Process(a) || f.replica == wire.Process(b)) {
			return true
		}
	}
	return false
}

// breaksOneCompute reports whether the nemesis kind may break one compute
// per key while its fault lasts and settles: Redis killed, paused, failed
// over or its Cluster master killed (every replica), every connection
// vanished (every replica), a replica partitioned from Redis, its
// connections reset, paused, stalled or killed (that replica). The nemesis schedule leaves a calm stretch after each such
// fault, past its settle, where one compute per key is judged.
func breaksOneCompute(kind string) bool {
	switch kind {
	case "redis-kill", "redis-kill-vanish", "vanish", "redis-pause", "failover", "cluster-master", "partition", "reset", "replica-pause", "replica-kill", "stall":
		return true
	}
	return false
}

// judgedShare is the share of the run that no fault breaking one compute
// per key (for some replica) covers, at a 10 ms grain.
func (c *checker) judgedShare() float64 {
	const grain = 10 * time.Millisecond
	if c.h.End <= 0 {
		return 0
	}
	var calm, all int
	for t := time.Duration(0); t < c.h.End; t += grain {
		all++
		if !c.broken("", "", t, t+grain) && !c.anyReplicaBroken(t, t+grain) {
			calm++
		}
	}
	return float64(calm) / float64(all)
}

// abandonedBefore reports whether a is a compute that ignores its context
// (wire.Compute), was abandoned (it ran past its ComputeTimeout), and b
// began after it was: its ComputeTimeout counted from the latest moment
// the cache's bound may have started, the first compute of a's request
// (the bound starts before a batch's first key, a refresh's too).
func (c *checker) abandonedBefore(a, b *Compute) bool {
	o := c.byReq[a.Req]
	ct := c.sc.Options.ComputeTimeout
	if o == nil || !o.Req.Compute.IgnoreContext || ct <= 0 {
		return false
	}
	start := a.Began
	for _, x := range c.h.Computes {
		if x.Req == a.Req && x.Began < start {
			start = x.Began
		}
	}
	return a.Ended-start > ct && b.Began >= start+ct
}

// anyReplicaBroken reports whether a fault on one replica that breaks one
// compute per key for it overlapped [from, to].
func (c *checker) anyReplicaBroken(from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.replica != "" && c.broken(f.replica, f.replica, from, to) {
			return true
		}
	}
	return false
}

// computeTags is the tags the calls of computes a and b gave their values.
func (c *checker) computeTags(a, b *Compute) []string {
	var tags []string
	for _, cp := range []*Compute{a, b} {
		if o := c.byReq[cp.Req]; o != nil {
			tags = append(tags, o.Req.Compute.Tags...)
		}
	}
	return tags
}

// writeDuring reports whether a Set, Delete or expiry of key, an
// invalidation of one of tags, a Clear or a purge overlapped [from, to].
func (c *checker) writeDuring(key string, tags []string, from, to time.Duration) bool {
	return c.writeOf(key, tags, from, to, true, 0)
}

// writeOf is writeDuring, with the HTTP route's writes (a POST, a purge)
// counted only when route is true (they reach the middleware's entries,
// not the cache's), and the request except (a Set whose value is judged)
// left out.
func (c *checker) writeOf(key string, tags []string, from, to time.Duration, route bool, except int64) bool {
	for _, o := range c.h.Ops {
		if (!route && strings.HasPrefix(o.Req.Op, "http-")) || (except != 0 && o.Req.ID == except) {
			continue
		}
		end := o.Return
		if o.Unknown {
			end = c.h.End
		}
		if o.Invoke > to || end < from {
			continue
		}
		switch o.Req.Op {
		case wire.OpSet, wire.OpDelete, wire.OpExpire:
			if o.Req.Key == key {
				return true
			}
		case wire.OpHTTPPost:
			// It deletes its URL's entry, whichever principal sent it: the
			// marker and the lease of every principal's response there.
			pr, _ := wire.HTTPKey(o.Req.Key)
			if kr, _ := wire.HTTPKey(key); isRouteKey(key) && pr == kr {
				return true
			}
		case wire.OpInvalidateTags, wire.OpExpireTags:
			for _, t := range o.Req.Tags {
				if slices.Contains(tags, t) {
					return true
				}
			}
		case wire.OpClear, wire.OpHTTPPurge:
			return true
		}
	}
	return false
}

// regroupedRun reports whether cp may be the handler run of requests that
// joined a run of another principal's request for their route's URL, and
// were not selected by its response (docs/http.md): its request reached
// cp's replica before such a run there had answered, and cp began after
// that run ended. Such a run is on the key of its variant, not the URL's:
// a request of its principal that arrives after the joined run answered
// runs on the URL's key, beside it. Its response is stored nowhere, so no
// purge fences it: it answers as without a cache. A run that is itself a
// regrouped one is joined by no request of another principal; principals
// with a forwarded host (keyed) or a session cookie (passing by the cache)
// share no run with others. A request whose run panicked, dropping the
// connection, is sent again by the client's transport (a GET on a reused
// connection): that request arrives when the panicked run ended.
func (c *checker) regroupedRun(cp *Compute) bool { return c.regroupedAs(cp, false) }

// surelyRegrouped reports whether cp is certainly such a run: its request
// reached the middleware while a run of another principal's request that
// is certainly on the URL's key still ran there (it joined that run's
// flight), and cp began after that run ended. An overlap of two runs of
// one variant is excused only when one may be a regrouped run and the
// other may be on the URL's key.
func (c *checker) surelyRegrouped(cp *Compute) bool { return c.regroupedAs(cp, true) }

// joinMargin is how long before a run ended a request must have reached
// the middleware for the checker to be sure it joined that run's flight:
// the cache reads the key from the store before it joins, and the flight
// answers once the run gave its lease up after its handler returned. On
// a quiet link both take well under the margin; a fault that delays the
// replica's traffic by d to 2d each way (latency, overload) can make the
// read's round trip 2d longer than the lease's.
func (c *checker) joinMargin(replica string, from, to time.Duration) time.Duration {
	const quiet = 25 * time.Millisecond
	if c.sc.Mode == "local" {
		return 5 * time.Millisecond
	}
	m := quiet
	for _, f := range c.faults {
		if f.from <= to && from <= f.to && (f.replica == "" || f.replica == wire.Process(replica)) &&
			(strings.HasPrefix(f.what, "latency") || strings.HasPrefix(f.what, "overload")) {
			d := c.stepBound() / 2 // no delay named: as long as a step may take
			if n := eachWay.FindStringSubmatch(f.what); n != nil {
				ms, _ := strconv.Atoi(n[1])
				d = time.Duration(ms) * time.Millisecond
			}
			m = max(m, quiet+2*d)
		}
	}
	return m
}

// eachWay reads the delay a latency or overload fault names.
var eachWay = regexp.MustCompile(`(\d+)ms each way`)

func (c *checker) regroupedAs(cp *Compute, sure bool) bool {
	memo := &c.regroupedMemo
	if sure {
		memo = &c.surelyRegroupedMemo
	}
	if r, ok := (*memo)[cp.ID]; ok {
		return r
	}
	if *memo == nil {
		*memo = map[string]bool{}
	}
	(*memo)[cp.ID] = false // runs of no length at one instant must not recurse for ever
	r := c.regroupedOf(cp, sure)
	(*memo)[cp.ID] = r
	return r
}

func (c *checker) regroupedOf(cp *Compute, sure bool) bool {
	route, principal := wire.HTTPKey(cp.Key)
	if !isRouteKey(cp.Key) || !sharesURLKey(principal) {
		return false
	}
	arrived := c.arrived(cp)
	for _, x := range c.h.Computes {
		if !joinable(x, route, principal, cp.Replica, cp.Began) {
			continue
		}
		if sure {
			// x certainly ran on the URL's key, and the request joined
			// its flight while its handler still ran.
			if arrived+c.joinMargin(cp.Replica, arrived, x.Ended) < x.Ended && !c.regroupedRun(x) {
				return true
			}
			continue
		}
		// x may have run on the URL's key, and its flight may not have
		// answered yet.
		if arrived < c.answered(x) && !c.surelyRegrouped(x) {
			return true
		}
	}
	return false
}

// joinable reports whether x is a run a request of principal for route on
// replica may have joined before a run of its own began at began: a run of
// another principal who shares the URL's key, on that replica, that ended
// (not by a panic, which drops its requests' connections) by then.
func joinable(x *Compute, route, principal, replica string, began time.Duration) bool {
	xr, xp := wire.HTTPKey(x.Key)
	return xr == route && xp != principal && sharesURLKey(xp) && x.Replica == replica && x.How != "panic" &&
		x.Ended > 0 && x.Ended <= began
}

// joinedAlike reports whether runs a and b of one variant on one replica
// share their fate: every run of another principal whose flight either of
// their requests may have joined was joined by both for certain (both
// arrived while it still ran, its margin before its end). Whether that
// run was on the URL's key (both regrouped behind it, into one flight of
// their variant) or regrouped itself (neither joined it, both on the
// URL's key, one flight), their runs are one flight's, and never overlap.
func (c *checker) joinedAlike(a, b *Compute) bool {
	if a.Replica != b.Replica {
		return false
	}
	route, principal := wire.HTTPKey(a.Key)
	arrA, arrB := c.arrived(a), c.arrived(b)
	relevant := false
	for _, x := range c.h.Computes {
		if !joinable(x, route, principal, a.Replica, min(a.Began, b.Began)) {
			continue
		}
		if arrA >= c.answered(x) && arrB >= c.answered(x) {
			continue // neither may have joined it
		}
		relevant = true
		from := min(arrA, arrB)
		if m := c.joinMargin(a.Replica, from, x.Ended); arrA+m >= x.Ended || arrB+m >= x.Ended {
			return false // one may have missed its flight
		}
	}
	return relevant
}

// arrived is when the attempt of cp's request that ran cp reached its
// replica's middleware: the last one before cp began (or, in a history
// that did not record it, when the replica sent the request, or, after a
// run of it that panicked and dropped the connection, when that run
// ended: the client's transport sends the request again).
func (c *checker) arrived(cp *Compute) time.Duration {
	at := c.invoked(cp.Req)
	if o := c.byReq[cp.Req]; o != nil {
		for _, a := range o.Arrived {
			if a <= cp.Began {
				at = max(at, a)
			}
		}
	}
	for _, x := range c.h.Computes {
		if x.Req == cp.Req && x.How == "panic" && x.Ended > 0 && x.Ended <= cp.Began {
			at = max(at, x.Ended)
		}
	}
	return at
}

// answered is a bound on when the flight of the handler run x answered
// the requests that joined it: before x's request returned, unless that
// request left first (its deadline) and x ran on, detached; then once
// its lease was given up after x's handler returned (the joiners' route
// stores nothing: its runs end by giving their lease up, a step the
// store bounds by a second), with a margin for a loaded machine.
func (c *checker) answered(x *Compute) time.Duration {
	o := c.byReq[x.Req]
	switch {
	case o == nil || o.Unknown:
		return c.h.End
	case o.Return < x.Ended:
		return x.Ended + time.Second + 50*time.Millisecond
	}
	return o.Return
}

// stepBound bounds one Redis step of the library: its budget follows a
// slow Redis up to WaitTimeout (docs/operating.md), and at least
// RedisTimeout; with a margin for a loaded machine.
func (c *checker) stepBound() time.Duration {
	o := c.sc.Options
	return max(o.WaitTimeout, o.RedisTimeout, 250*time.Millisecond) + 50*time.Millisecond
}

// joinerBypass reports whether o is a request of the joiners' route
// answered by a handler run of its own (a bypass): its principal shares the
// URL's key, so it passed by the cache only after joining a run whose
// response did not select it (or its regrouped run's did not). Such runs
// are judged: the requests of one variant regroup, so two of them never
// overlap.
func (c *checker) joinerBypass(o *Op) bool {
	route, principal := wire.HTTPKey(o.Req.Key)
	return o.Req.Op == wire.OpHTTPGet && route == joinKey && sharesURLKey(principal)
}

// regrouped is regroupedRun of the compute with ID id, if there is one.
func (c *checker) regrouped(id string) bool {
	cp := c.computes[id]
	return cp != nil && c.regroupedRun(cp)
}

// sharesURLKey reports whether a request of principal is keyed by its
// route's URL, with the requests of other principals that the responses
// tell apart (a credential, a cookie the route varies on).
func sharesURLKey(principal string) bool {
	return !strings.Contains(principal, "host=") && !strings.Contains(principal, "session=")
}
