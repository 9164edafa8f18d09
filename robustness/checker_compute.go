package robustness

// The properties of computes: one compute per key at a time across the
// fleet while Redis is healthy or only slow, and no degraded answer while
// it is only slow.

import (
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
// the overload's injection to its heal and settle.
func (c *checker) noDegradedUnderOverload() {
	for _, a := range c.answers() {
		if a.outcome == "degraded" && c.overloaded(a.op.Invoke, a.op.Return) {
			c.fail("no degraded under overload", []*Op{a.op}, "%s answered degraded (#%d [%s, %s]) while Redis was slow, not down",
				a.key, a.op.Req.ID, ms(a.op.Invoke), ms(a.op.Return))
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
		if o := c.byReq[cp.Req]; o != nil && o.Resp.Outcome == "bypass" {
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
				excused := (degraded[a.ID] || degraded[b.ID]) && !c.overloaded(from, max(aEnd, bEnd))
				if excused || c.faulty("", from, max(aEnd, bEnd)) || c.writeDuring(a.Key, from, max(aEnd, bEnd)) {
					continue
				}
				c.fail("one compute", nil, "%s computed twice at once: %s on %s for #%d [%s, %s] and %s on %s for #%d [%s, %s]",
					a.Key, a.ID, a.Replica, a.Req, ms(a.Began), ms(aEnd), b.ID, b.Replica, b.Req, ms(b.Began), ms(bEnd))
			}
		}
	}
}

// writeDuring reports whether a Set, Delete or invalidation of key
// overlapped [from, to].
func (c *checker) writeDuring(key string, from, to time.Duration) bool {
	for _, o := range c.h.Ops {
		end := o.Return
		if o.Unknown {
			end = c.h.End
		}
		if o.Invoke > to || end < from {
			continue
		}
		switch o.Req.Op {
		case wire.OpSet, wire.OpDelete, wire.OpExpire, wire.OpHTTPPost:
			if o.Req.Key == key {
				return true
			}
		case wire.OpInvalidateTags, wire.OpExpireTags, wire.OpClear, wire.OpHTTPPurge:
			return true
		}
	}
	return false
}
