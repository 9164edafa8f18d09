package robustness

// The invalidation fence as a property: after InvalidateTags, ExpireTags,
// Clear or a purge by surrogate key returned, no later call is answered a
// value carrying an invalidated tag that read the origin before it; and the
// stand-ins (a failing or slow compute's) it exempts.

import (
	"slices"
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// invalidations: after InvalidateTags, ExpireTags or Clear returned, no
// call that began later is answered a value carrying one of its tags (any,
// for Clear) that read the origin before it began: not from Redis, L1, a
// batch, a waiter, a stale or fail-safe answer, nor a compute in flight.
// Exempt: degraded values on the replica that computed them; after
// ExpireTags, a stale value standing in for a failing compute; and a load
// or batch answered through the invalidation by a replica that could not
// read the marks then (its fence let the answer through unchecked). A purge by
// surrogate key (http-purge, the middleware's InvalidateTags) holds the
// same fence over the route responses tagged with one of its keys.
func (c *checker) invalidations() {
	answers := c.answers()
	for _, inv := range c.h.Ops {
		switch inv.Req.Op {
		case wire.OpInvalidateTags, wire.OpExpireTags, wire.OpClear, wire.OpHTTPPurge:
		default:
			continue
		}
		if !inv.Ok() {
			continue
		}
		for _, a := range answers {
			if c.sc.Mode == "local" && a.op.Replica != inv.Replica {
				continue
			}
			// A call that began after the invalidation returned; or any
			// call answered after it returned by a load (its own or one it
			// joined) whose compute began before it: a load meets the
			// fence when it answers, however long its compute or its fill
			// took; or a batch that returned after it, for every key.
			if a.op.Invoke <= inv.Return && !c.loadThrough(a, inv) && !c.batchThrough(a, inv) {
				continue
			}
			if isRouteKey(a.key) != (inv.Req.Op == wire.OpHTTPPurge) {
				continue // the middleware's entries live in a cache of their own, purged by surrogate key
			}
			if a.outcome == "bypass" || (a.v.Unstored || c.regrouped(a.v.ID)) && a.outcome == "miss" {
				// A request that passes by the cache, or whose run's tagged
				// response is not stored (stale on arrival, or a run of
				// requests a joined run did not select), gets its own
				// handler run's answer, as without a cache (docs/http.md,
				// "Purging").
				continue
			}
			if inv.Req.Op != wire.OpClear && !overlaps(a.v.Tags, inv.Req.Tags) {
				continue
			}
			if c.degraded(a) || a.v.Src == "fallback" || c.lost(inv.Invoke, a.op.Return) {
				continue // a lost mark is lost to whoever had not read it (docs/how-it-works.md)
			}
			if (c.loadThrough(a, inv) || c.batchThrough(a, inv)) && c.marksUnreadable(a.op.Replica, inv.Return, a.op.Return) {
				// Its fence, at the answer, could not read the marks: it
				// answered unchecked, as documented (a call that began
				// after the invalidation found its entry unvouched).
				continue
			}
			if inv.Req.Op == wire.OpExpireTags && c.failedAfter(a, inv.Invoke) {
				continue // an expired value may stand in for a failing compute
			}
			if !c.certainlyBefore(a, inv.Invoke) {
				continue
			}
			c.fail("invalidation", []*Op{inv, a.op}, "%s answered %s (%s), written before %s #%d began", a.key, a.v.ID, c.describe(a), inv.Req.Op, inv.Req.ID)
		}
	}
}

// stampSlack is how much later than the library's own decision a replica
// may stamp a call's return: a load checks its answer against the
// invalidations (servable) and then returns up the stack to the replica's
// clock read, and an invalidation may return in between. An answer
// stamped within stampSlack of the invalidation's return may have been
// decided before it, and is judged as concurrent with it.
const stampSlack = time.Millisecond

// loadThrough reports whether a was answered after inv returned by a
// compute that began before inv: one that ran through the whole
// invalidation, or a load (a miss or a shared call, the outcomes that say
// so) still in its fill.
func (c *checker) loadThrough(a answer, inv *Op) bool {
	if a.v.Src != "compute" || a.op.Return <= inv.Return+stampSlack {
		return false
	}
	cp := c.computes[a.v.ID]
	if cp == nil || cp.Began >= inv.Invoke {
		return false
	}
	return cp.Ended > inv.Return || a.outcome == "miss" || a.outcome == "shared"
}

// batchThrough reports whether a is a key of a GetOrComputeMany that
// returned after inv did: a batch answers its caller once, when its last
// key has an answer, and the fence is judged then for every value it
// hands back (docs/invalidation.md), however early that key got its
// answer (computed, waited for or read) while the batch waited for the
// others.
func (c *checker) batchThrough(a answer, inv *Op) bool {
	return a.op.Req.Op == wire.OpGetOrComputeMany && a.op.Return > inv.Return+stampSlack
}

// failedAfter reports whether a compute of a's key failed after t and
// before a returned (on a's replica in local mode), or ran past
// SoftTimeout, or, with BusyError, past WaitTimeout: the stand-ins an
// expired value may be.
func (c *checker) failedAfter(a answer, t time.Duration) bool {
	if a.op.Resp.ResultErr != "" {
		return true
	}
	// A call that shared another's stale-if-error answer does not say so:
	// look for that answer on the same replica.
	for _, o := range c.h.Ops {
		if o.Replica == a.op.Replica && o.Resp.ResultErr != "" && o.Resp.Value != nil && o.Resp.Value.ID == a.v.ID &&
			o.Invoke <= a.op.Return && a.op.Invoke <= o.Return {
			return true
		}
	}
	// A stand-in after waiting: SoftTimeout for its own compute, or
	// WaitTimeout for another replica's with BusyError.
	after := c.sc.Options.SoftTimeout
	if c.sc.Options.BusyError && (after == 0 || c.sc.Options.WaitTimeout < after) {
		after = c.sc.Options.WaitTimeout
	}
	// A load goes on after its compute ends: its fill is one more Redis
	// step, within the budget.
	fill := max(c.sc.Options.RedisTimeout, 250*time.Millisecond)
	for _, cp := range c.h.Computes {
		// Callers that joined the load share its stand-in: measure from
		// the compute's begin, not the caller's.
		ofLoad := cp.Key == a.key || cp.Req == a.op.Req.ID && len(a.op.Req.Keys) > 0
		// The load's clock starts before its compute does (the claim
		// comes first): no later than the call that started it.
		start := min(cp.Began, c.invoked(cp.Req))
		// A replica cut from Redis cannot see a load end (its lease stays
		// in Redis): to it the load goes on.
		goesOn := cp.Ended == 0 || cp.Ended+fill > a.op.Return || c.unreachable(a.op.Replica, cp.Ended, a.op.Return)
		if after > 0 && ofLoad && cp.Began < a.op.Return && goesOn && a.op.Return-start >= after {
			return true // answered while the load (its compute, then its fill) went on
		}
		// A batch's compute fails for all its keys when one key's does,
		// and the fail-safe re-arms each of them (any caller's batch).
		sameCall := cp.Key == a.key || cp.Req == a.op.Req.ID && len(a.op.Req.Keys) > 0 || c.askedFor(cp.Req, a.key)
		if sameCall && (cp.How == "failed" || cp.How == "panic" || cp.How == "cancelled") &&
			cp.Ended >= t && cp.Began <= a.op.Return && (c.sc.Mode != "local" || cp.Replica == a.op.Replica) {
			return true
		}
	}
	return false
}

// isRouteKey reports whether key is one of the middleware's ("h0"…).
func isRouteKey(key string) bool { return strings.HasPrefix(key, "h") }

func overlaps(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}
