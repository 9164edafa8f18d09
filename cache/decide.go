package cache

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/stampede-go/stampede/cache/internal/marks"
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
func (c *Cache[V]) judge(ctx context.Context, e *entry[V], found bool, now time.Time) (verdict, error) {
	return c.judgeAt(ctx, e, found, now, time.Time{})
}

// judgeAt is judge with the time at which the marks are checked: zero
// when now may predate the read (the marks then read their own clock), or
// now itself when it was read after the read (the hit path, saving a clock
// read per hit).
//
// An entry whose marks could not be vouched for (marks.Unknown) is judged
// expired, and the error says why: a compute replaces it, but Get, which
// computes nothing, must not answer "not found" for a value that may be
// valid (it returns the error).
//
// e is read, never kept: a pointer, so that the hit path copies no entry.
func (c *Cache[V]) judgeAt(ctx context.Context, e *entry[V], found bool, now, marksNow time.Time) (verdict, error) {
	if !found {
		return verdictMiss, nil
	}
	// The one check that counts Stats().Invalidated: once per entry read.
	switch inv, err := c.invalidationAt(ctx, e, marksNow, true); inv {
	case marks.Hard:
		return verdictMiss, nil
	case marks.Soft:
		// Expired by ExpireTags, a fail-safe value too: the next call tries
		// the origin, and the value may stand in if that fails (mayStandIn).
		return verdictExpired, nil
	case marks.Unknown:
		// Expired; but a fail-safe value re-armed after the origin failed
		// still answers as Stale (stale-if-error) until its throttle ends,
		// so the origin is left alone.
		if e.failSafe && c.policy.State(e.w, now, 0, 0) == stale.Fresh {
			return verdictFailSafe, nil
		}
		if err == nil {
			err = errUnvouched
		}
		return verdictExpired, err
	}
	switch st := c.policy.State(e.w, now, e.took, c.xfetchDraw(e, now)); st {
	case stale.Fresh, stale.RefreshEarly:
		switch {
		case e.failSafe:
			return verdictFailSafe, nil
		case st == stale.RefreshEarly:
			return verdictEarly, nil
		}
		return verdictHit, nil
	case stale.Stale:
		return verdictStale, nil
	case stale.Expired:
		return verdictExpired, nil
	}
	return verdictMiss, nil
}

// plainHit reports whether judgeAt says verdictHit for an entry e, found,
// read at now (the real clock's, also the marks' time), from what this
// process knows: neither kept nor fail-safe, untagged, its namespace mark
// vouched for and not above its generation (marks.UntaggedValidAt), fresh
// and out of XFetch's reach. false says nothing: ask judgeAt. It is the
// hit path's first question (issue 26), in a small frame that calls only
// small functions: a caller of a shared GET resumes on a stack cold in
// the CPU's caches, and judgeAt's frame and its calls reach lines below
// what the return from the wait warmed, each a cache miss.
func (c *Cache[V]) plainHit(e *entry[V], now time.Time) bool {
	return !e.kept && !e.failSafe && len(e.stamp.Tags) == 0 &&
		now.Before(e.w.FreshUntil) && !c.xfetchMayPick(e, now) &&
		c.marks.UntaggedValidAt(e.stamp.Gen, c.marks.MonoAt(now, c.realClock))
}

// xfetchDraw is XFetch's uniform draw for judging e at now, or 0 when no
// draw could pick e for an early refresh (see xfetchMayPick), which picks
// no fresh entry: the verdicts are the same, without a draw and a
// logarithm per hit of an entry far from its expiry (most hits; issue 26).
func (c *Cache[V]) xfetchDraw(e *entry[V], now time.Time) float64 {
	if c.xfetchMayPick(e, now) {
		return rand.Float64()
	}
	return 0
}

// xfetchMayPick reports whether some draw of rand.Float64 may have XFetch
// pick e at now: stale.Policy.State picks a fresh entry when its fresh
// time left is at most Δ·β·(−ln(1−u)), and a draw u has 1−u ≥ 2⁻⁵³, so
// −ln(1−u) ≤ 36.74 < maxXFetchLog.
func (c *Cache[V]) xfetchMayPick(e *entry[V], now time.Time) bool {
	return c.policy.Beta > 0 && e.took > 0 && float64(e.w.FreshUntil.Sub(now)) <= float64(e.took)*c.policy.Beta*maxXFetchLog
}

// maxXFetchLog bounds −ln(1−u) for any draw u of rand.Float64, with room
// for rounding: the largest is −ln(2⁻⁵³) ≈ 36.74.
const maxXFetchLog = 37

// errUnvouched explains an entry judged expired because its invalidation
// marks could not be read in time, when the check gave no error of its own.
var errUnvouched = errors.New("cache: invalidation marks not vouched for in time")

// invalidation is the one check of an entry against the invalidation marks
// (see internal/marks), for every path that may answer with an entry: judge,
// L1, a lead's re-read, a value standing in for a failed compute, a computed
// value before it is stored, a load's answer as it reaches each caller
// (servable). Marks that cannot be read in time give marks.Unknown (see
// there); a kept entry is judged by keptFloor (see invalidationAt). It
// does not count Stats().Invalidated: judge, the check of an entry as it
// is read, does, so that an entry read once counts once however often it
// is checked again (a stand-in, a load's answer for each caller).
func (c *Cache[V]) invalidation(ctx context.Context, e entry[V]) marks.State {
	inv, _ := c.invalidationAt(ctx, &e, time.Time{}, false)
	return inv
}

// invalidationAt is invalidation with the cache clock's now, which spares
// the hit path a clock read when the clock is the real one. A kept entry
// (computed while Redis was unreachable) is judged by keptFloor instead:
// only this process's own invalidations are known to reach it. count
// says whether an invalidated entry counts in Stats().Invalidated. The
// error, with marks.Unknown, says why the marks could not be read.
func (c *Cache[V]) invalidationAt(ctx context.Context, e *entry[V], now time.Time, count bool) (marks.State, error) {
	if e.kept {
		if e.stamp.Gen < c.keptFloor.Load() {
			if count {
				c.stats.invalidated.Add(1)
			}
			return marks.Hard, nil
		}
		return marks.Valid, nil
	}
	st, err := c.marks.CheckAt(ctx, e.stamp, c.marks.MonoAt(now, c.realClock))
	if st != marks.Valid {
		if count {
			c.stats.invalidated.Add(1)
		}
		if err != nil && !noMarksRead(ctx) {
			c.logRare(ctx, slog.LevelWarn, "stampede: invalidation marks unreadable; the entry does not answer", "", err)
		}
	}
	return st, err
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
	case marks.Hard:
		return false
	case marks.Soft:
		return prev.failSafe || prev.w.ErrorUntil.After(prev.w.FreshUntil)
	}
	return true
}

// servable is the invalidation fence at the moment a load's answer reaches
// a caller, for every caller of every load (single key or batch, led,
// joined or waited for): a value whose compute began before an
// invalidation that has returned by now answers nobody, however it got
// here — a compute in flight during the invalidation, a value checked
// before a fill that was slow to end, a load this caller joined after the
// invalidation returned. A value standing in for a failed or slow compute
// (stale-if-error, SoftTimeout, fail-safe) is refused only by a hard
// invalidation, as mayStandIn says; a fallback's value is not fn's; a
// degraded value knows only of this process's own invalidations (see
// invalidationAt). Marks that cannot be read let the value answer
// (marks.Unknown), as a compute's value answers then, unless the caller's
// ctx ended meanwhile.
func (c *Cache[V]) servable(ctx context.Context, l loaded[V], err error) bool {
	st := c.fenceState(ctx, l, err)
	// A caller whose ctx ended while its fence read the marks is owed its
	// ctx's error, not a value the fence could not check: its deadline,
	// not Redis, cut the read (coalesce answers it ctx's cause).
	return st == marks.Valid || st == marks.Unknown && ctx.Err() == nil
}

// fenceState is servable's verdict before it lets marks.Unknown through:
// marks.Valid when the answer may reach its caller (or no fence applies
// to it), marks.Hard or marks.Soft when it may not, marks.Unknown when
// its marks could not be read in time. A batch given up on by its
// caller's ctx refuses Unknown too (see Cache.fenceBatch).
func (c *Cache[V]) fenceState(ctx context.Context, l loaded[V], err error) marks.State {
	switch {
	case err != nil && !errors.Is(err, ErrNotFound): // no value
		return marks.Valid
	case l.outcome == Fallback:
		return marks.Valid
	case l.outcome == Stale && l.cause != nil:
		if st := c.invalidation(ctx, l.entry()); st == marks.Hard || st == marks.Unknown {
			return st
		}
		return marks.Valid
	}
	return c.fence(ctx, l.entry())
}

// fence is invalidation at the moment an answer reaches its caller
// (marks.CheckFence): a mark read whose answer came late is read once more.
// A kept entry is judged as invalidation judges it.
func (c *Cache[V]) fence(ctx context.Context, e entry[V]) marks.State {
	if e.kept {
		return c.invalidation(ctx, e)
	}
	st, err := c.marks.CheckFence(ctx, e.stamp)
	if st == marks.Unknown && err != nil && !noMarksRead(ctx) {
		c.logRare(ctx, slog.LevelWarn, "stampede: invalidation marks unreadable; the answer goes unchecked", "", err)
	}
	return st
}

// errNoMarksRead is the cause of the context under which a check judges
// by what this process knows of the marks, without reading them (a batch
// whose caller's ctx ended: Cache.batchResult); an Unknown there is its
// own choice, not Redis failing, and is not logged.
var errNoMarksRead = errors.New("cache: judged without a marks read")

// noMarksRead reports whether ctx is a check's that reads no marks
// (errNoMarksRead).
func noMarksRead(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), errNoMarksRead)
}
