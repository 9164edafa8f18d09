package cache

import (
	"math/rand/v2"
	"time"

	"github.com/stampede-go/stampede/stale"
)

// verdict is the freshness switch's answer for an entry read: every path
// (single key, batch, Get) asks judge, so they cannot drift apart.
type verdict uint8

const (
	// verdictMiss: nothing usable; compute.
	verdictMiss verdict = iota
	// verdictExpired: compute; the entry may still answer if fn fails
	// (stale-if-error).
	verdictExpired
	// verdictHit: fresh; serve it.
	verdictHit
	// verdictEarly: fresh, and XFetch picked this caller to refresh it in
	// the background; serve it as a hit.
	verdictEarly
	// verdictStale: serve it (Outcome Stale) and refresh in the background.
	verdictStale
	// verdictFailSafe: a stale value re-armed after the origin failed
	// (FailSafeThrottle); serve it as Stale, and leave the origin alone.
	verdictFailSafe
)

// judge applies the freshness policy to an entry read at now.
func (c *Cache[V]) judge(e entry[V], found bool, now time.Time) verdict {
	if !found {
		return verdictMiss
	}
	switch st := c.policy.State(e.w, now, e.took, rand.Float64()); st {
	case stale.Fresh, stale.RefreshEarly:
		switch {
		case e.failSafe:
			return verdictFailSafe
		case st == stale.RefreshEarly:
			return verdictEarly
		}
		return verdictHit
	case stale.Stale:
		return verdictStale
	case stale.Expired:
		return verdictExpired
	}
	return verdictMiss
}
