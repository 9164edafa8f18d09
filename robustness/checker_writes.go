package robustness

// The properties of stored values: after a Set, Delete or Expire returned,
// no later call is answered a value written before it (on another replica,
// past the cross-replica window), and values read from the store never go
// back on a replica.

import (
	"fmt"
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// crossWindow is how long after a replica's Set or Delete returned
// another replica may still answer the value it replaced: the documented
// cross-replica read window (a GET reply or fill notification in flight;
// with L1, the write's announcement on its way), 500 ms with the suite's
// slack. With L1, an announcement that a fault may have lost (see
// announcementLost) leaves the replaced value in L1 until L1TTL ends.
func (c *checker) crossWindow(replica string, from, to time.Duration) time.Duration {
	w := 500 * time.Millisecond
	if c.sc.Options.L1Size > 0 && c.announcementLost(replica, from, to) {
		w += c.sc.Options.L1TTL
	}
	return w
}

// announcementLost reports whether a fault during [from, to] (or settling
// then) may have kept a write's announcement from replica: its
// subscription killed or silenced, Redis killed, paused or failed over, or replica
// itself cut off, reset, paused or killed. Without one, an announcement
// arrives, and L1 drops the replaced value.
func (c *checker) announcementLost(replica string, from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.from > to || from > f.to {
			continue
		}
		kind, _, _ := strings.Cut(f.what, ":")
		switch {
		case kind == "pubsub-kill":
			return true
		case kind == "latency-unsubscribed" && f.replica == wire.Process(replica):
			return true
		case breaksOneCompute(kind) && (f.replica == "" || f.replica == wire.Process(replica)):
			return true
		}
	}
	return false
}

// writes: after Set, Delete or Expire of a key returned, a call of that
// key that began later on the same replica (on another, later than the
// cross-replica window) is not answered a value written before the write
// began. Exempt, after Expire: the expired value standing in for a failing
// or slow compute (stale-if-error, SoftTimeout), as after ExpireTags.
func (c *checker) writes() {
	byKey := map[string][]answer{}
	for _, a := range c.answers() {
		byKey[a.key] = append(byKey[a.key], a)
	}
	for _, w := range c.h.Ops {
		if !w.Ok() || (w.Req.Op != wire.OpSet && w.Req.Op != wire.OpDelete && w.Req.Op != wire.OpExpire && w.Req.Op != wire.OpHTTPPost) {
			continue // a POST through the middleware deletes its route's entry
		}
		for _, a := range byKey[w.Req.Key] {
			begin := w.Return
			if a.op.Replica != w.Replica {
				if c.sc.Mode == "local" {
					continue
				}
				begin += c.crossWindow(a.op.Replica, w.Invoke, a.op.Invoke)
			}
			if a.op.Invoke <= begin || c.degraded(a) || a.v.Src == "fallback" || a.v.ID == fmt.Sprintf("s%d", w.Req.ID) {
				continue
			}
			if c.lost(w.Invoke, a.op.Return) {
				continue // a failover or a restart without persistence may lose the write itself (docs/operating.md)
			}
			if w.Req.Op == wire.OpHTTPPost && c.unreachable(w.Replica, w.Invoke, w.Return) {
				continue // a POST's deletion that Redis failed is logged, not reported (docs/http.md)
			}
			if w.Req.Op == wire.OpExpire && c.failedAfter(a, w.Invoke) {
				continue // an expired value may stand in for a failing compute
			}
			if !c.certainlyBefore(a, w.Invoke) {
				continue
			}
			c.fail("write", []*Op{w, a.op}, "%s answered %s (%s), written before %s #%d began", a.key, a.v.ID, c.describe(a), w.Req.Op, w.Req.ID)
		}
	}
}

// monotonic: on one replica, a value read from the store (a hit, a wait, a
// stale answer, a Get) is never older than one read from the store by a
// call that returned before it began: stored values never go back.
func (c *checker) monotonic() {
	stored := func(a answer) bool {
		switch a.outcome {
		case "hit", "waited", "stale", "get":
			return a.v.Src == "compute"
		}
		return false
	}
	byKey := map[string][]answer{}
	for _, a := range c.answers() {
		if stored(a) {
			k := a.op.Replica + "\x00" + a.key
			byKey[k] = append(byKey[k], a)
		}
	}
	for _, as := range byKey {
		for i, a1 := range as {
			c1 := c.computes[a1.v.ID]
			for _, a2 := range as[i+1:] {
				if a1.op.Return >= a2.op.Invoke || a1.v.ID == a2.v.ID {
					continue
				}
				c2 := c.computes[a2.v.ID]
				if c1 == nil || c2 == nil || c2.Began >= c1.Began {
					continue
				}
				if c.lost(a1.op.Return, a2.op.Invoke) {
					continue
				}
				c.fail("monotonic", []*Op{a1.op, a2.op}, "%s went back from %s to %s (began %s, before %s)", a1.key, c1.ID, c2.ID, ms(c2.Began), ms(c1.Began))
			}
		}
	}
}
