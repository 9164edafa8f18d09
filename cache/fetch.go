package cache

import (
	"context"
	"fmt"
	"time"

	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/stale"
)

// loaded is what one shared load hands to every caller waiting on it.
type loaded[V any] struct {
	value   V
	outcome Outcome
	// created is when the value was computed, for Result.Age; zero for a
	// value this load computed (a miss, shared, a degraded compute, a
	// fallback), whose Age is 0.
	created  time.Time
	negative bool  // a cached "not found"
	cause    error // Result.Err: the origin's error a stale value answered for, or why the value was not stored
	// w are the value's windows when it is stored (for L1).
	w stale.Windows
	// digest identifies the stored envelope, for L1 (0: unknown), and
	// size is its length.
	digest uint64
	size   int
	// took is how long the value's compute took (XFetch's Δ, for L1).
	took time.Duration
	// stamp is the value's generation and tags (for L1, and the
	// invalidation checks); kept says it is a degraded one (see entry.kept).
	stamp marks.Stamp
	kept  bool
}

// loaded hands e to callers with outcome o; a fail-safe value always
// answers as Stale, saying so in Result.Err.
func (e entry[V]) loaded(o Outcome) loaded[V] {
	l := loaded[V]{value: e.value, outcome: o, created: e.w.Created, negative: e.negative, w: e.w, stamp: e.stamp, digest: e.digest, size: e.size, took: e.took, kept: e.kept}
	if e.failSafe {
		l.outcome, l.cause = Stale, ErrFailSafe
	}
	return l
}

// entry is what a cacheable load puts into L1.
func (l loaded[V]) entry() entry[V] {
	return entry[V]{value: l.value, w: l.w, negative: l.negative, stamp: l.stamp, digest: l.digest, size: l.size, took: l.took, kept: l.kept}
}

// cacheable reports whether a load's answer may go into L1: a value fresh
// from the store, never a stale, degraded, fallback or unstored one.
func (l loaded[V]) cacheable(err error) bool {
	switch l.outcome {
	case Hit, Miss, Shared, Waited:
		return err == nil && l.cause == nil && !l.w.FreshUntil.IsZero()
	}
	return false
}

// fetch is GetOrCompute, Fetch and FetchWithFallback: the hit path, then a
// load shared by the process's callers of key.
//
// The Redis hit path (one shared read, a decode, the checks) stays in this
// function, and everything else goes to functions of their own (fetchL1,
// fetchDegraded, fetchFailed, fetchJudged), so that its stack frame stays
// small: under a hot key each of many parked callers resumes on a stack
// that is cold in the CPU's caches, and every line of frame it zeroes or
// copies an entry through costs a miss (issue 26). The entry read is
// handed on by pointer for the same reason.
func (c *Cache[V]) fetch(ctx context.Context, key string, fn, fallback func(context.Context) (V, error)) (Result[V], error) {
	if ctx == nil {
		return Result[V]{}, ErrNilContext
	}
	if err := c.check(key); err != nil {
		return Result[V]{}, err
	}
	if fn == nil {
		return Result[V]{}, ErrNilFunc
	}
	var version uint64
	if c.l1 != nil {
		if r, err, ok := c.fetchL1(ctx, key, fn); ok {
			return r, err
		}
		version = c.l1.version()
	}
	if !c.store.availableWait(ctx) {
		return c.fetchDegraded(ctx, key, version, fn)
	}
	// The hit path: one read and a decode, no coalescing, no claim. The
	// functions below build their own keys, so that nothing of the hit
	// path escapes to the heap. e is own, or the decode shared by the
	// callers of one GET (read-only), or nil (not found); v is this
	// caller's value.
	var own entry[V]
	var e *entry[V]
	var v V
	var at time.Time
	var err error
	if c.redis != nil { // readHit, in fetch's frame: one frame fewer to return through after the wait
		var r reply
		if r, at, err = c.redis.p.ReadShared(ctx, key); err == nil && r.Found {
			e, v = c.redis.sharedEntry(ctx, key, r, &own)
		}
	} else {
		e, v, err = c.readLocal(ctx, key, &own)
	}
	if err != nil {
		return c.fetchFailed(ctx, key, version, fn, fallback, err)
	}
	// The entry is judged, its freshness and against the invalidation
	// marks (whose trust is measured on it), at now: a reading taken
	// after the read, and after this call began. The GET's own reading
	// (at) is both, for every caller that shares the GET: it was taken
	// once the reply had come and no caller could join the GET any more
	// (redisstore's readGroup.do). It saves a clock reading per caller
	// (60-100 ns on a VM's kvm-clock, issue 26), and it keeps the
	// invalidation guarantee, which is about the calls that begin after
	// InvalidateTags returns (docs/how-it-works.md: a mark is trusted for
	// InvalidationWait from when its read, or a heartbeat, was sent, and
	// InvalidateTags returns InvalidationWait after its marks were
	// written): a mark read sent before the marks were written and still
	// trusted at now is trusted at a moment before InvalidateTags
	// returned, so this call began before it did. That a caller resumes
	// after the reading, by the wake-up delay, changes nothing: the
	// verdict is the reading's, as with a reading of its own after which
	// it is descheduled. Only with the real clock (at is time.Now's).
	now := at
	if !c.realClock || now.IsZero() {
		now = c.now()
	}
	found := e != nil
	if !found {
		e = &own
	}
	verdict := verdictHit
	if !found || !c.plainHit(e, now) {
		verdict, _ = c.judgeAt(ctx, e, found, now, now)
	}
	if verdict != verdictHit {
		return c.fetchJudged(ctx, key, version, fn, fallback, e, v, verdict)
	}
	if c.l1 != nil {
		c.l1putRead(key, e, v, version)
	}
	return c.hit(ctx, key, e, v, now, false)
}

// readLocal is readHit for the process-local store: key's entry read
// into own (nil when not found) and its value.
func (c *Cache[V]) readLocal(ctx context.Context, key string, own *entry[V]) (*entry[V], V, error) {
	var found bool
	var err error
	*own, found, err = c.store.read(ctx, hitKeys(key), readShared)
	if !found {
		return nil, own.value, err
	}
	return own, own.value, err
}

// l1putRead is l1put for the entry e the hit path read, with its value v.
// Not inlined: its copy of the entry would sit in fetch's frame.
//
//go:noinline
func (c *Cache[V]) l1putRead(key string, e *entry[V], v V, version uint64) {
	full := *e
	full.value = v
	c.l1put(key, full, version)
}

// fetchL1 is fetch's L1 hit path: a map read, the marks and two counters;
// ok is false when L1 does not answer.
func (c *Cache[V]) fetchL1(ctx context.Context, key string, fn func(context.Context) (V, error)) (r Result[V], err error, ok bool) {
	now := c.now()
	e, ok := c.l1get(ctx, key, now)
	if !ok {
		return r, nil, false
	}
	if c.l1Early(e, now) {
		c.refreshAsync(key, e, one(key, fn))
	}
	r, err = c.hit(ctx, key, &e, e.value, now, true)
	return r, err, true
}

// fetchDegraded is fetch while the store may not be used (the breaker is
// open): a load shared by the process's callers, without the store.
func (c *Cache[V]) fetchDegraded(ctx context.Context, key string, version uint64, fn func(context.Context) (V, error)) (Result[V], error) {
	return c.coalesce(ctx, key, version, func(sctx context.Context) (loaded[V], error) {
		return c.degraded(sctx, c.keysFor(key), one(key, fn), nil)
	})
}

// fetchFailed is fetch after its read failed with err: ctx's cause when
// ctx ended, the fleet's protocol when Redis is slow, else a load without
// the store.
func (c *Cache[V]) fetchFailed(ctx context.Context, key string, version uint64, fn, fallback func(context.Context) (V, error), err error) (Result[V], error) {
	if ctx.Err() != nil {
		return Result[V]{}, context.Cause(ctx)
	}
	if redisstep.UnderLoad(err) { // Redis is slow, not down: keep the fleet's protocol
		fb := oneOrNil(key, fallback)
		return c.coalesce(ctx, key, version, func(sctx context.Context) (loaded[V], error) {
			return c.load(sctx, c.keysFor(key), one(key, fn), fb, nil)
		})
	}
	return c.fetchDegraded(ctx, key, version, fn)
}

// fetchJudged is fetch for an entry read that is not a plain hit (v),
// with its value val (e may be shared by the callers of one GET: see
// readHit): served and refreshed in the background, or loaded again by a
// load shared by the process's callers.
func (c *Cache[V]) fetchJudged(ctx context.Context, key string, version uint64, fn, fallback func(context.Context) (V, error), read *entry[V], val V, v verdict) (Result[V], error) {
	var prev *entry[V]
	e := *read // a copy: read may be shared
	e.value = val
	switch v {
	case verdictEarly:
		c.l1put(key, e, version) // fresh: served from L1 until the refresh's fill invalidates it
		c.refreshAsync(key, e, one(key, fn))
		return c.answer(ctx, key, e.loaded(Hit), nil)
	case verdictStale:
		c.refreshAsync(key, e, one(key, fn))
		return c.answer(ctx, key, e.loaded(Stale), nil)
	case verdictFailSafe:
		return c.answer(ctx, key, e.loaded(Stale), nil)
	case verdictExpired:
		expired := e    // a copy of its own: it escapes to the load
		prev = &expired // answers if the recompute fails
	}
	fb := oneOrNil(key, fallback)
	return c.coalesce(ctx, key, version, func(sctx context.Context) (loaded[V], error) {
		return c.load(sctx, c.keysFor(key), one(key, fn), fb, prev)
	})
}

// oneOrNil is one(key, fn), or nil without fn (no fallback).
func oneOrNil[V any](key string, fn func(context.Context) (V, error)) batchFunc[V] {
	if fn == nil {
		return nil
	}
	return one(key, fn)
}

// l1Early reports whether XFetch picks this L1 hit of e at now to refresh
// it in the background, as it would a hit read from Redis: an L1 that
// answers a hot key's every read would otherwise leave it no read to be
// picked on until L1TTL ends.
func (c *Cache[V]) l1Early(e entry[V], now time.Time) bool {
	return c.opts.Beta > 0 && c.policy.State(e.w, now, e.took, c.xfetchDraw(&e, now)) == stale.RefreshEarly
}

// l1get returns key's entry from L1 when it is there and no invalidation
// since its compute began is known; now must have just been read (the
// marks' trust is measured on it).
func (c *Cache[V]) l1get(ctx context.Context, key string, now time.Time) (entry[V], bool) {
	e, ok := c.l1.get(key, now)
	if !ok {
		c.l1wanted(key)
		return entry[V]{}, false
	}
	if inv, _ := c.invalidationAt(ctx, &e, now, false); inv != marks.Valid {
		return entry[V]{}, false
	}
	return e, true
}

// coalesce runs load once for all concurrent callers of key in the process;
// version is L1's, taken before the read that led here. Each caller's
// answer passes the invalidation fence when it reaches that caller
// (servable): one refused there is loaded again, by a load of its own or
// one it joins (up to maxRecomputes times, then [ErrInvalidated]).
func (c *Cache[V]) coalesce(ctx context.Context, key string, version uint64, load func(context.Context) (loaded[V], error)) (Result[V], error) {
	for attempt := 0; ; attempt++ {
		r, err := c.share(ctx, key, version, attempt > 0, load)
		if r.outcome == 0 { // this caller's wait ended early, or the load failed before an outcome
			return Result[V]{}, err
		}
		if !c.servable(ctx, r, err) {
			if ctx.Err() != nil {
				return Result[V]{}, context.Cause(ctx)
			}
			if attempt < maxRecomputes {
				continue
			}
			return Result[V]{}, fmt.Errorf("%w: %q", ErrInvalidated, key)
		}
		return c.answer(ctx, key, r, err)
	}
}

// share is one attempt of coalesce, without the fence at the answer: load
// run once for the concurrent callers of key (again says it is run again
// after the fence refused an answer: Stats().Recomputed), its answer put
// into L1 by the caller that ran it, and Outcome Shared for the callers
// that joined a compute. An answer without an outcome is an error only
// (the caller's wait ended, or the load failed before an outcome).
func (c *Cache[V]) share(ctx context.Context, key string, version uint64, again bool, load func(context.Context) (loaded[V], error)) (loaded[V], error) {
	led := false
	r, _, err := c.sf.Do(ctx, key, func(sctx context.Context) (loaded[V], error) {
		led = true
		if again {
			c.stats.recomputed.Add(1)
		}
		r, err := load(sctx)
		// Only the leader puts into L1: version is the leader's own, from
		// before its read; a joiner's is from its own start, which may be
		// after a write the load's read did not see. The put comes before
		// any caller returns: a caller answered with r before r is in L1
		// would let an older read's put in behind its back.
		if c.l1 != nil && r.cacheable(err) && c.servable(sctx, r, err) {
			c.l1put(key, r.entry(), version)
		}
		return r, err
	})
	// led is read only once the load's answer came (outcome set): a
	// caller whose wait ended early leaves it being written.
	if r.outcome == Miss && !led {
		r.outcome = Shared
	}
	return r, err
}

// hit answers a caller with value v of a fresh entry e read at now, from
// L1 or Redis, without building a shared load: this is the hot path.
func (c *Cache[V]) hit(ctx context.Context, key string, e *entry[V], v V, now time.Time, fromL1 bool) (Result[V], error) {
	if fromL1 {
		c.stats.l1Hit()
	} else {
		c.stats.outcome(Hit)
	}
	if c.opts.Observer != nil {
		c.observe(ctx, Event{Kind: EventOutcome, Key: key, Outcome: Hit, Negative: e.negative})
	}
	res := Result[V]{Value: v, Outcome: Hit, Age: max(now.Sub(e.w.Created), 0)}
	if e.negative {
		c.stats.negativeHits.Add(1)
		return res, errCachedNotFound
	}
	return res, nil
}

// answer turns a load into the caller's Result, counting its outcome.
func (c *Cache[V]) answer(ctx context.Context, key string, r loaded[V], err error) (Result[V], error) {
	c.stats.outcome(r.outcome)
	if c.opts.Observer != nil {
		c.observe(ctx, Event{Kind: EventOutcome, Key: key, Outcome: r.outcome, Negative: r.negative})
	}
	res := Result[V]{Value: r.value, Outcome: r.outcome, Err: r.cause}
	if !r.created.IsZero() {
		res.Age = max(c.now().Sub(r.created), 0)
	}
	if r.negative && err == nil {
		c.stats.negativeHits.Add(1)
		err = errCachedNotFound
	}
	return res, err
}

// load runs once per process for a missing or expired key: claim it and
// lead, wait for the replica that holds it, or compute degraded.
func (c *Cache[V]) load(ctx context.Context, k keys, fn, fallback batchFunc[V], prev *entry[V]) (loaded[V], error) {
	cl := c.store.claimMany(ctx, []keys{k})[0]
	switch {
	case cl.won:
		return c.leadOne(ctx, k, cl.claim, fn, prev, time.Time{})
	case cl.err == nil:
		return c.wait(ctx, k, fn, fallback, prev, cl)
	case ctx.Err() != nil: // every caller left: nobody wants a compute
		return loaded[V]{}, context.Cause(ctx)
	case redisstep.UnderLoad(cl.err):
		// Redis answered others but not this claim within WaitTimeout:
		// as after a wait for a busy lease, OnBusy applies.
		return c.overloaded(ctx, k, fn, fallback, prev, cl.err)
	}
	return c.degraded(ctx, k, fn, prev)
}

// overloaded answers a caller whose claim Redis, answering others, did not
// answer within WaitTimeout: its fallback, ErrLeaseBusy under BusyError,
// else a value that may stand in for a failed compute, else a compute
// without the store, as when Redis is down.
func (c *Cache[V]) overloaded(ctx context.Context, k keys, fn, fallback batchFunc[V], prev *entry[V], err error) (loaded[V], error) {
	switch {
	case fallback != nil:
		return c.fallback(ctx, k, fallback)
	case c.opts.OnBusy == BusyError:
		return c.onError(ctx, prev, 0, ErrLeaseBusy)
	case c.mayStandIn(ctx, prev):
		return c.onError(ctx, prev, 0, err)
	}
	return c.degraded(ctx, k, fn, prev)
}

// degraded answers one key without the store (Redis is unreachable): from
// what this process computed in the last DegradedTTL, or by computing it.
func (c *Cache[V]) degraded(ctx context.Context, k keys, fn batchFunc[V], prev *entry[V]) (loaded[V], error) {
	now := c.now()
	if e, fresh, ok := c.keptEntry(k.Key, now); ok {
		if fresh {
			return e.loaded(Degraded), nil
		}
		if prev == nil {
			prev = &e
		}
	}
	r, floor, err := c.computeDegraded(ctx, []string{k.Key}, fn)
	if err != nil {
		return loaded[V]{}, err
	}
	l, err := c.degradedFor(ctx, k.Key, r, prev, floor)
	c.keep(k.Key, l, err, prev, c.now(), floor)
	return l, err
}
