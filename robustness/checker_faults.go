package robustness

// The fault windows the checker excuses by: each nemesis' fault from its
// injection to its healing plus settle, and what a window says of a replica
// (paused, cut off from Redis) or of Redis (data lost, overloaded).

import (
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// fault is the window during which a nemesis' fault may still show: from
// its injection to its healing plus settle.
type fault struct {
	from, to time.Duration
	what     string
	replica  string // the one replica process it affects (a twin's too, wire.Process); "" for all
}

// settle is how long after a fault heals its effects may still show: the
// breaker's cooldown and probe, a reconnect, a lease that ran out.
func (sc Scenario) settle() time.Duration {
	return max(sc.Options.BreakerCooldown, time.Second) + max(sc.Options.LeaseTTL, time.Second) + time.Second
}

func faultWindows(h *History, settle time.Duration) []fault {
	var out []fault
	var open *fault
	for _, e := range h.Events {
		if strings.HasPrefix(e.What, "replica-idle") || strings.HasPrefix(e.What, "replica-sparse") {
			continue // no fault: a replica without traffic, or with little, is held to every promise
		}
		if !e.Heal {
			f := fault{from: e.At, to: h.End + settle, what: e.What}
			for _, r := range []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"} {
				if strings.Contains(e.What, r+" ") {
					f.replica = r
				}
			}
			out = append(out, f)
			open = &out[len(out)-1]
			continue
		}
		if open != nil {
			open.to = e.At + settle
			open = nil
		}
	}
	return out
}

// paused reports whether replica was paused or killed during [from, to],
// or its process stalled (a pausing round: stopped as a process starved of
// CPU is).
func (c *checker) paused(replica string, from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.replica == wire.Process(replica) && f.from <= to && from <= f.to &&
			(strings.HasPrefix(f.what, "replica-pause") || strings.HasPrefix(f.what, "replica-kill") || strings.HasPrefix(f.what, "stall")) {
			return true
		}
	}
	return false
}

// unreachable reports whether a fault that keeps replica from Redis (not
// one that only slows it, nor a stall of its process: a starved process is
// not cut off, and must not read its late replies as an outage) overlaps
// [from, to].
//
// A vanish (connections dead, Redis up) keeps from Redis only the calls in
// flight as it struck: those invoked before it plus vanishMargin.
func (c *checker) unreachable(replica string, from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.from > to || from > f.to || f.replica != "" && f.replica != wire.Process(replica) || strings.HasPrefix(f.what, "latency") || strings.HasPrefix(f.what, "stall") {
			continue
		}
		if strings.HasPrefix(f.what, "vanish") && from > f.from+vanishMargin {
			continue
		}
		return true
	}
	return false
}

// vanishMargin is how long after a vanish's injection a call may still
// have been sent on a connection that died under it: the proxies vanish
// one after another, and the event is recorded before the first.
const vanishMargin = 20 * time.Millisecond

// cutOff reports whether replica could not reach Redis for all of [from,
// to]: it lies between the injection and the heal (no settle added) of one
// fault that cuts replicas off from Redis (Redis killed or paused, this
// replica partitioned), so no claim or fill of a compute within it can
// have reached Redis.
func (c *checker) cutOff(replica string, from, to time.Duration) bool {
	for _, sp := range c.cuts(replica, false) {
		if sp.from <= from && to <= sp.to {
			return true
		}
	}
	return false
}

// span is a stretch of the run's clock.
type span struct{ from, to time.Duration }

// cuts are the faults that cut replica off from Redis, each from its
// injection to its heal (no settle added): Redis killed or paused, or
// replica partitioned; with failovers, a Sentinel failover or a Cluster
// master killed too.
func (c *checker) cuts(replica string, failovers bool) []span {
	return c.spans(func(kind, what string) bool {
		switch {
		case kind == "partition" && strings.Contains(what, wire.Process(replica)+" "):
		case kind == "redis-kill" || kind == "redis-kill-vanish" || kind == "redis-pause":
		case failovers && (kind == "failover" || kind == "cluster-master"):
		default:
			return false
		}
		return true
	})
}

// spans are the faults whose injection event keep accepts (given the
// nemesis' name and the event's text), each from its injection to its heal
// (the run's end when it never healed), no settle added.
func (c *checker) spans(keep func(kind, what string) bool) []span {
	var out []span
	for i, e := range c.h.Events {
		if kind, _, _ := strings.Cut(e.What, ":"); e.Heal || !keep(kind, e.What) {
			continue
		}
		healed := c.h.End
		for _, h := range c.h.Events[i+1:] {
			if h.Heal {
				healed = h.At
				break
			}
		}
		out = append(out, span{e.At, healed})
	}
	return out
}

// lost reports whether Redis may have lost data during [from, to].
func (c *checker) lost(from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.from <= to && from <= f.to && (strings.HasPrefix(f.what, "redis-kill") && !c.sc.Persistence ||
			strings.HasPrefix(f.what, "failover") || strings.HasPrefix(f.what, "cluster-master")) {
			return true
		}
	}
	return false
}

// overloaded reports whether the overload nemesis (Redis slow past the
// budget for every replica, never down) overlaps [from, to].
func (c *checker) overloaded(from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.from <= to && from <= f.to && strings.HasPrefix(f.what, "overload") {
			return true
		}
	}
	return false
}

// marksUnreadable reports whether replica may have been unable to read the
// invalidation marks at some moment of [from, to]: a fault that keeps it
// from Redis (Redis killed, paused or failed over, a Cluster master
// killed, or replica itself partitioned) lay between its injection and
// its heal plus the breaker's cooldown and two Redis budgets (the probe
// that closes the breaker, a read in flight). An answer whose fence cannot
// read the marks goes through unchecked, as degraded mode's do
// (docs/how-it-works.md, docs/invalidation.md): a replica that cannot
// reach Redis cannot learn of an invalidation.
func (c *checker) marksUnreadable(replica string, from, to time.Duration) bool {
	after := max(c.sc.Options.BreakerCooldown, 300*time.Millisecond) + 2*max(c.sc.Options.RedisTimeout, 250*time.Millisecond)
	for _, sp := range c.cuts(replica, true) {
		if sp.from <= to && from <= sp.to+after {
			return true
		}
	}
	return false
}
