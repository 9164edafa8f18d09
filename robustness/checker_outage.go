package robustness

// The cost of an outage known at once: while Redis refuses connections, a
// call that needs nothing but Redis answers without waiting out a budget.

import (
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// refusedGrace is how long after Redis starts refusing connections a call
// may still pay for it: a step already in flight on a connection at the
// kill (one cut inline waits out its budget, 250 ms by default), and the
// end of the connections Redis' death closed.
const refusedGrace = 300 * time.Millisecond

// refusedOutageCost: while Redis refuses connections (the redis-kill
// nemesis: the server's process dead, its port refusing every dial), a
// call that needs Redis alone (Get, Set, Delete, Expire, and the
// invalidations) costs its caller no budget: the client's refused dial
// tells the step at once, and once the breaker is open, the call that
// finds its cooldown over waits only for its probe's refused dial (issue
// 39 item 3). Judged on the calls invoked refusedGrace or more after the
// kill, on a replica never paused meanwhile, by the time each spent before
// the heal: the bound is three fifths of the budget, which a call that
// waited out one budget exceeds (and a call invoked later than the bound
// before the heal is not judged: it may be answered by Redis back).
func (c *checker) refusedOutageCost() {
	if c.sc.Mode != "redis" {
		return
	}
	bound := max(c.sc.Options.RedisTimeout, 250*time.Millisecond) * 3 / 5
	for _, sp := range c.refusals() {
		for _, o := range c.h.Ops {
			if !redisOnly(o.Req.Op) || o.Paused || o.Invoke < sp.from+refusedGrace || o.Invoke > sp.to-bound {
				continue
			}
			end := sp.to // a call that never returned waited past the heal
			if !o.Unknown {
				end = min(o.Return, sp.to)
			}
			if took := end - o.Invoke; took > bound {
				c.fail("refused outage costs no budget", []*Op{o}, "%s %s (#%d on %s [%s, %s]) waited %s while Redis refused connections, from %s into the outage (bound %s): %s",
					o.Req.Op, o.Req.Key, o.Req.ID, o.Replica, ms(o.Invoke), ms(o.Return), ms(took), ms(o.Invoke-sp.from), ms(bound), o.Resp.Err)
			}
		}
	}
}

// redisOnly reports whether op needs nothing but Redis: no compute runs in
// it.
func redisOnly(op string) bool {
	switch op {
	case wire.OpGet, wire.OpSet, wire.OpDelete, wire.OpExpire, wire.OpInvalidateTags, wire.OpExpireTags, wire.OpClear:
		return true
	}
	return false
}

// refusals are the stretches during which Redis refused connections: each
// redis-kill from its injection to its heal.
func (c *checker) refusals() []span {
	return c.spans(func(kind, _ string) bool { return kind == "redis-kill" })
}
