package cache

import (
	"context"
	"log/slog"
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

// judge applies the invalidation marks and the freshness policy to an
// entry read at now: an entry invalidated (InvalidateTags, Clear) since its
// compute began is a miss, or expired when the invalidation was soft.
func (c *Cache[V]) judge(ctx context.Context, e entry[V], found bool, now time.Time) verdict {
	if !found {
		return verdictMiss
	}
	switch c.invalidation(ctx, e) { // now may predate the read: the marks read their own clock
	case invHard:
		return verdictMiss
	case invSoft:
		// Expired by ExpireTags, a fail-safe value too: the next call tries
		// the origin, and the value may stand in if that fails (mayStandIn).
		return verdictExpired
	case invUnknown:
		// Expired; but a fail-safe value re-armed after the origin failed
		// still answers as Stale (stale-if-error) until its throttle ends,
		// so the origin is left alone.
		if e.failSafe && c.policy.State(e.w, now, 0, 0) == stale.Fresh {
			return verdictFailSafe
		}
		return verdictExpired
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

// invalidation is the one check of an entry against the invalidation marks
// (see marks.go), for every path that may answer with an entry: judge, L1,
// a lead's re-read, a value standing in for a failed compute, a computed
// value before it answers. Marks that cannot be read in time give
// invUnknown (see there).
func (c *Cache[V]) invalidation(ctx context.Context, e entry[V]) invState {
	return c.invalidationAt(ctx, e, time.Time{})
}

// invalidationAt is invalidation with the cache clock's now, which spares
// the hit path a clock read when the clock is the real one.
func (c *Cache[V]) invalidationAt(ctx context.Context, e entry[V], now time.Time) invState {
	st, err := c.marks.checkAt(ctx, e.stamp, c.marks.monoAt(now, c.realClock))
	if st != invValid {
		c.stats.invalidated.Add(1)
		if err != nil {
			c.logRare(ctx, slog.LevelWarn, "stampede: invalidation marks unreadable; the entry does not answer", "", err)
		}
	}
	return st
}

// mayStandIn reports whether prev may answer for a failed or slow compute
// now (stale-if-error, SoftTimeout): inside its StaleIfError window, not a
// cached "not found", and not known to be hard-invalidated since it was
// read. A value expired by ExpireTags before its TTL ended stands in only
// if it has a stale-if-error window past its TTL (StaleIfError, or Stale,
// above 0; a fail-safe value was re-armed inside one): being inside its
// TTL is not enough.
func (c *Cache[V]) mayStandIn(ctx context.Context, prev *entry[V]) bool {
	if prev == nil || prev.negative || !prev.w.UsableOnError(c.now()) {
		return false
	}
	switch c.invalidation(ctx, *prev) {
	case invHard:
		return false
	case invSoft:
		return prev.failSafe || prev.w.ErrorUntil.After(prev.w.FreshUntil)
	}
	return true
}
