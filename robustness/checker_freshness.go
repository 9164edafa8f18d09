package robustness

// The freshness property (a file named *_windows.go would build on Windows only): a value is answered only within the windows it was
// written with — as fresh (a hit) within its TTL, and on any path within
// TTL + max(Stale, StaleIfError), past which the store keeps it no longer
// (docs/guarantees.md). Degraded values, kept in a replica's memory with
// DegradedTTL, have their own exemption (checker.degraded).

import (
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// windowSlack covers what one clock read in milliseconds (the stored
// envelope's) and another in nanoseconds may differ by.
const windowSlack = 5 * time.Millisecond

// freshness judges every answer of the cache's paths (the HTTP route's
// windows are its responses' own) against the windows its value was
// written with. When was the value written is not observed: what is
// certain is that its entry existed when some call first read it from the
// store (a hit, a stale answer, a waiter's, a Get) or, for a Set's value,
// when the Set returned. So the property is judged from the earliest such
// moment, which can only make it more lenient: an answer fails when it was
// invoked after that moment plus the window its outcome may use. A value
// an "unchanged" compute re-armed before the answer returned is written
// again at an unknown moment, and is not judged.
func (c *checker) freshness() {
	as := c.answers()
	firstRead := map[string]time.Duration{}
	for _, a := range as {
		switch a.outcome {
		case "hit", "stale", "waited", "get":
		default:
			continue
		}
		if t, ok := firstRead[a.v.ID]; !ok || a.op.Return < t {
			firstRead[a.v.ID] = a.op.Return
		}
	}
	for _, a := range as {
		if strings.HasPrefix(a.op.Req.Op, "http-") || a.v.Src == "fallback" || c.degraded(a) {
			continue
		}
		written, ok := firstRead[a.v.ID]
		if at, set := c.setReturned(a); set && (!ok || at < written) {
			written, ok = at, true
		}
		if !ok || c.rearmedBefore(a) {
			continue
		}
		ttl, stale := c.windowsOf(a.v)
		if ttl <= 0 {
			continue
		}
		limit, what := ttl, "its TTL"
		if a.outcome != "hit" {
			limit, what = ttl+max(stale, c.sc.Options.StaleIfError), "TTL + max(Stale, StaleIfError)"
		}
		if a.op.Invoke > written+limit+windowSlack {
			c.fail("freshness", []*Op{a.op}, "%s answered %s (%s) as %q %s after its entry was certainly written (%s), past %s (%s)",
				a.key, a.v.ID, c.describe(a), a.outcome, ms(a.op.Invoke-written), ms(written), what, ms(limit))
		}
	}
}

// rearmedBefore reports whether an "unchanged" compute vouched for a's
// value again, beginning before a returned: it wrote the value's windows
// anew.
func (c *checker) rearmedBefore(a answer) bool {
	for _, r := range c.revalidated[a.v.ID] {
		if r.Began < a.op.Return {
			return true
		}
	}
	return false
}

// windowsOf is the TTL and Stale value v was written with: a Set's own
// options, or the TTL its compute set (wire.Compute.TTL), else the
// scenario's.
func (c *checker) windowsOf(v wire.Value) (ttl, stale time.Duration) {
	ttl, stale = c.sc.Options.TTL, c.sc.Options.Stale
	switch v.Src {
	case "set":
		if s := c.sets[v.ID]; s != nil {
			if s.Req.SetTTL > 0 {
				ttl = s.Req.SetTTL
			}
			if s.Req.SetStale > 0 {
				stale = s.Req.SetStale
			}
		}
	case "compute":
		if cp := c.computes[v.ID]; cp != nil {
			if o := c.byReq[cp.Req]; o != nil && o.Req.Compute.TTL > 0 {
				ttl = o.Req.Compute.TTL
			}
		}
	}
	return ttl, stale
}
