package robustness

// The property of the shared HTTP cache: a response reaches only requests
// it was made for.

import (
	"strings"

	"github.com/stampede-go/stampede/robustness/wire"
)

// selected: a route response answers only a request of the principal it
// was made for (the key its handler stamped on it, wire.HTTPKey: the
// credential, the cookies the route varies on, the forwarded host), on
// every path — a hit, a request that joined a run, a waiter on another
// replica, a stale answer, a bypass. Served to any other request, one
// user's response has reached another, or a poisoned entry a victim.
func (c *checker) selected() {
	for _, a := range c.answers() {
		if isRouteKey(a.key) && a.v.Key != a.key {
			c.fail("selected", []*Op{a.op}, "%s (noise %v) answered %s, made for %s (%s)",
				a.key, a.op.Req.Noise, a.v.ID, a.v.Key, c.describe(a))
		}
	}
	for _, o := range c.h.Ops {
		route, principal := wire.HTTPKey(o.Req.Key)
		// A session cookie passes by the cache before any run is joined.
		if o.Req.Op != wire.OpHTTPGet || route != joinKey || strings.Contains(principal, "session=") {
			continue
		}
		if o.Resp.Outcome == "bypass" {
			c.cov.Unselected++ // past the regrouped run: a handler run of its own
		} else if v := o.Resp.Value; v != nil && c.regrouped(v.ID) {
			c.cov.Unselected++
		}
	}
}
