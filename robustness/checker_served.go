package robustness

// The property "a fresh stored value is served, not recomputed": the
// library exists to spare the origin, so a call that finds a value in the
// store within its TTL answers it (a hit) instead of computing again.

import (
	"fmt"
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// stored is a value certainly in the store from some moment on.
type stored struct {
	v wire.Value
	// from is when what wrote it began (its compute's call, its Set): an
	// invalidation or write of the key since may have undone it.
	from time.Duration
	// written is the earliest its entry can have been written (its
	// compute's end, its Set's invoke): it is fresh at least until
	// written + its TTL (the suite sets no Jitter).
	written time.Duration
	// seen is when it was certainly in the store: the first return of a
	// read that found it there (a Fetch's hit or stale answer, a Get), or
	// its Set's return.
	seen time.Duration
	// set is the request that wrote it, when a Set did.
	set int64
}

// servedNotRecomputed: a compute of a key must not begin while a value of
// it is certainly stored and fresh — seen in the store before the call
// that computed was invoked, within its TTL of the earliest it can
// have been written — unless something since may have undone it: a write
// or expiry of the key, an invalidation of one of its tags, a Clear, a
// compute's value that may have replaced it and expired (a cached
// not-found, a shorter TTL of its own), or a fault (other than a killed
// subscription or an idle spell) on every replica or on the caller's.
// XFetch (Beta) refreshes fresh values early by design: such scenarios are
// not judged, nor are the HTTP route's computes (its windows are its
// responses'), nor degraded values (kept in one replica's memory).
func (c *checker) servedNotRecomputed() {
	if c.sc.Options.Beta > 0 {
		return
	}
	local := c.sc.Mode == "local"
	group := func(replica, key string) string {
		if local {
			return replica + "\x00" + key
		}
		return key
	}
	values := map[string]map[string]*stored{} // group → value ID → stored
	note := func(g string, v wire.Value, from, written, seen time.Duration) {
		if values[g] == nil {
			values[g] = map[string]*stored{}
		}
		if s := values[g][v.ID]; s != nil {
			s.seen = min(s.seen, seen)
			return
		}
		values[g][v.ID] = &stored{v: v, from: from, written: written, seen: seen}
	}
	for _, a := range c.answers() {
		if strings.HasPrefix(a.op.Req.Op, "http-") || c.degradedIDs[a.v.ID] || c.degraded(a) {
			continue
		}
		switch a.outcome {
		case "hit", "stale", "get":
		default:
			continue
		}
		switch a.v.Src {
		case "compute":
			cp := c.computes[a.v.ID]
			if cp == nil || cp.Ended == 0 || (local && cp.Replica != a.op.Replica) {
				continue
			}
			note(group(a.op.Replica, a.key), a.v, c.invoked(cp.Req), cp.Ended, a.op.Return)
		case "set":
			s := c.sets[a.v.ID]
			if s == nil || (local && s.Replica != a.op.Replica) {
				continue
			}
			note(group(a.op.Replica, a.key), a.v, s.Invoke, s.Invoke, a.op.Return)
			values[group(a.op.Replica, a.key)][a.v.ID].set = s.Req.ID
		}
	}
	for id, s := range c.sets {
		if !s.Ok() {
			continue
		}
		v := wire.Value{Key: s.Req.Key, Src: "set", ID: id, Tags: s.Req.Tags}
		note(group(s.Replica, s.Req.Key), v, s.Invoke, s.Invoke, s.Return)
		values[group(s.Replica, s.Req.Key)][id].set = s.Req.ID
	}
	for _, cp := range c.h.Computes {
		o := c.byReq[cp.Req]
		if o == nil || strings.HasPrefix(o.Req.Op, "http-") || o.Resp.Outcome == "bypass" || c.degradedIDs[cp.ID] {
			continue
		}
		// The newest value certainly stored before the call: older ones
		// it replaced.
		var s *stored
		for _, cand := range values[group(o.Replica, cp.Key)] {
			if cand.v.ID != cp.ID && cand.seen < o.Invoke && (s == nil || cand.written > s.written) {
				s = cand
			}
		}
		if s == nil {
			continue
		}
		ttl, _ := c.windowsOf(s.v)
		fresh := s.written + ttl
		if ttl <= 0 || cp.Began+windowSlack >= fresh {
			continue
		}
		c.cov.Recomputes++
		// A mark written up to δ before the value's call may still refuse
		// it (the fence's own margin): look from δ earlier.
		delta := c.sc.Options.InvalidationWait
		if delta <= 0 {
			delta = 100 * time.Millisecond
		}
		w := c.writeOf(cp.Key, s.v.Tags, s.from-delta, cp.Began, false, s.set)
		n := c.replacedDuring(o.Replica, cp.Key, s.v.ID, s.written, cp.Began)
		l := c.storeMayHaveLost(o.Replica, s.from, cp.Began)
		if w || n || l {
			c.cov.RecomputesExcused++
			continue
		}
		c.fail("fresh value served", []*Op{o}, "%s computed again (%s on %s for #%d, began %s) while %s was stored (seen %s) and fresh until at least %s: %s",
			cp.Key, cp.ID, cp.Replica, cp.Req, ms(cp.Began), s.v.ID, ms(s.seen), ms(fresh), c.describeStored(s))
	}
}

// replacedDuring reports whether a compute of key (on replica in
// process-local mode) other than except ended in [from, to] with what may
// have replaced the judged value and be no longer fresh at to: a cached
// ErrNotFound (NegativeTTL), or a value of its own shorter TTL.
func (c *checker) replacedDuring(replica, key, except string, from, to time.Duration) bool {
	for _, cp := range c.h.Computes {
		if cp.Key != key || cp.ID == except || cp.Ended < from || cp.Ended > to || (c.sc.Mode == "local" && cp.Replica != replica) {
			continue
		}
		switch cp.How {
		case "not-found":
			return true
		case "ok":
			ttl := c.sc.Options.TTL
			if o := c.byReq[cp.Req]; o != nil && o.Req.Compute.TTL > 0 {
				ttl = o.Req.Compute.TTL
			}
			if cp.Ended+ttl < to+windowSlack {
				return true
			}
		}
	}
	return false
}

// storeMayHaveLost reports whether a fault overlapped [from, to] (with its
// settle) on every replica or on replica: Redis' data lost, or a read of
// it failing or cut short. A killed subscription does neither: decisions
// read the marks on their request path then (nor is an idle or sparse
// spell a fault: faultWindows leaves them out).
func (c *checker) storeMayHaveLost(replica string, from, to time.Duration) bool {
	for _, f := range c.faults {
		kind, _, _ := strings.Cut(f.what, ":")
		if f.from > to || from > f.to || kind == "pubsub-kill" {
			continue
		}
		if f.replica == "" || f.replica == wire.Process(replica) {
			return true
		}
	}
	return false
}

func (c *checker) describeStored(s *stored) string {
	what := s.v.Src
	if cp := c.computes[s.v.ID]; cp != nil {
		what = fmt.Sprintf("computed on %s for #%d [%s, %s]", cp.Replica, cp.Req, ms(cp.Began), ms(cp.Ended))
	} else if o := c.sets[s.v.ID]; o != nil {
		what = "set by " + o.String()
	}
	return what
}
