package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/stale"
)

// task is one key a leader holds the claim of, and what became of it.
type task[V any] struct {
	k     keys
	claim claim[V]
	// unclaimed: computed without the key's claim (OnBusy: BusyCompute after
	// WaitTimeout), whose gen alone is set: fenced like a claimed compute,
	// but nothing is kept alive, stored or released.
	unclaimed bool
	prev      *entry[V] // answers if the compute fails (stale-if-error)
	// prevRaw is prev's value as encoded in the store, when the claim
	// brought it (see claim.raw); "" when unknown.
	prevRaw string
	// after: a refresh of the entry created then; an entry found created
	// after it is someone else's newer fill (zero on a miss).
	after time.Time

	res loaded[V]
	err error
}

// leadOne is lead for a single key.
func (c *Cache[V]) leadOne(ctx context.Context, k keys, cl claim[V], fn batchFunc[V], prev *entry[V], after time.Time) (loaded[V], error) {
	t := &task[V]{k: k, claim: cl, prev: prev, after: after}
	c.lead(ctx, []*task[V]{t}, fn)
	return t.res, t.err
}

// lead computes the keys of tasks with one call of fn while holding their
// claims, and fills them in one round trip: this is the only place a value
// is computed and stored, for a single key and for a batch alike. Every
// claim ends filled or abandoned (the abandon notification wakes the
// waiters at once), whatever fn does: fail, panic, call runtime.Goexit or
// outlive ComputeTimeout.
func (c *Cache[V]) lead(ctx context.Context, tasks []*task[V], fn batchFunc[V]) {
	// The previous holder may have filled between our read and our claim
	// (the Redis claim re-read the key in the same step).
	ks := make([]keys, len(tasks))
	cls := make([]claim[V], len(tasks))
	for i, t := range tasks {
		ks[i], cls[i] = t.k, t.claim
	}
	done := make([]bool, len(tasks))
	now := c.now()
	raws := fromClaims(cls) // the entries handed out are the claims': their raw bytes match
	err := reread(ctx, c.store, ks, cls, func(i int, e entry[V], found bool) {
		t := tasks[i]
		if !found {
			// Deleted (or gone) since the read that brought us here: what
			// that read found may not stand in for a failed compute, nor
			// be re-armed by the fail-safe — it would bring a deleted or
			// overwritten value back.
			t.prev, t.prevRaw = nil, ""
			return
		}
		inv := c.invalidation(ctx, e)
		if inv == marks.Hard { // as if not found
			t.prev, t.prevRaw = nil, ""
			return
		}
		state := c.policy.State(e.w, now, 0, 0)
		// Done when someone else filled since the entry that brought us here:
		// on a miss (after is zero) only a fresh fill counts; a refresh is
		// done by any newer entry.
		// A fail-safe value still fresh was re-armed after another holder's
		// origin call failed: it is done too, whenever it was created, so
		// that the origin is left alone for the throttle.
		if inv == marks.Valid && (e.w.Created.After(t.after) || e.failSafe) && (!t.after.IsZero() || state == stale.Fresh) && (!e.failSafe || state == stale.Fresh) {
			t.res, done[i] = e.loaded(Hit), true
			return
		}
		t.prev, t.prevRaw = nil, "" // the entry found now replaces what the earlier read found
		if state != stale.Gone {
			t.prev = &e
			if raws {
				t.prevRaw = cls[i].raw
			}
		}
	})
	var todo []*task[V]
	for i, t := range tasks {
		if done[i] {
			c.store.abandon(ctx, t.k, t.claim) // nothing to fill: release the claim
		} else {
			todo = append(todo, t)
		}
	}
	switch {
	case len(todo) == 0:
	case err != nil: // the store failed: compute without it
		c.leadDegraded(ctx, todo, fn)
	case c.softTimeout(todo):
		c.leadSoft(ctx, todo, fn)
	default:
		c.computeFill(ctx, todo, fn)
	}
}

// leadDegraded computes tasks without the store, which just failed, and
// abandons their claims.
func (c *Cache[V]) leadDegraded(ctx context.Context, tasks []*task[V], fn batchFunc[V]) {
	defer func() {
		for _, t := range tasks {
			if !t.unclaimed {
				c.store.abandon(ctx, t.k, t.claim)
			}
		}
	}()
	r, floor, err := c.computeDegraded(ctx, taskKeys(tasks), fn)
	for _, t := range tasks {
		t.res, t.err = loaded[V]{}, err
		if err == nil {
			t.res, t.err = c.degradedFor(ctx, t.k.Key, r, t.prev, floor)
		}
	}
}

// softTimeout reports whether SoftTimeout applies to tasks: callers wait
// for them (they are not a background refresh, whose after is set) and
// every one of them has a value that may answer for a failed compute.
func (c *Cache[V]) softTimeout(tasks []*task[V]) bool {
	if c.opts.SoftTimeout <= 0 {
		return false
	}
	now := c.now()
	for _, t := range tasks {
		if !t.after.IsZero() || t.prev == nil || t.prev.negative || !t.prev.w.UsableOnError(now) {
			return false
		}
	}
	return true
}

// leadSoft is computeFill bounded by SoftTimeout: past it, the tasks are
// answered by their stale values (Result.Err matches ErrSoftTimeout) and
// the compute goes on in the background, filling when it ends.
func (c *Cache[V]) leadSoft(ctx context.Context, tasks []*task[V], fn batchFunc[V]) {
	work := make([]*task[V], len(tasks))
	for i, t := range tasks {
		cp := *t
		work[i] = &cp
	}
	finished := make(chan struct{})
	// The compute outlives this call (and a refresh's context): it runs
	// until it ends or Close cancels background work.
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(c.bgCtx, cancel)
	if !c.goDetached(func() {
		defer close(finished)
		defer cancel()
		defer stop()
		c.computeFill(bctx, work, fn)
	}) {
		stop()
		cancel()
		c.computeFill(ctx, tasks, fn) // closing: no background work may start
		return
	}
	timer := time.NewTimer(c.opts.SoftTimeout)
	defer timer.Stop()
	select {
	case <-finished:
		for i, t := range tasks {
			*t = *work[i]
		}
	case <-timer.C:
		for _, t := range tasks {
			if !c.mayStandIn(ctx, t.prev) { // invalidated meanwhile: wait for the compute
				<-finished
				for i, t := range tasks {
					*t = *work[i]
				}
				return
			}
		}
		c.stats.softTimeouts.Add(1)
		for _, t := range tasks {
			t.res, t.err = t.prev.loaded(Stale), nil
			t.res.cause = ErrSoftTimeout
		}
	}
}

// computeFill computes tasks with one fn call while keeping their claims
// alive, and fills the results in one round trip; a failed compute that a
// stale value answers for re-arms that value for FailSafeThrottle, so the
// fleet leaves the origin alone meanwhile. Every claim is released. An
// unclaimed task is computed and fenced the same way, and stored nowhere.
func (c *Cache[V]) computeFill(ctx context.Context, tasks []*task[V], fn batchFunc[V]) {
	c.computeFillAttempt(ctx, tasks, fn, 0)
}

// maxRecomputes bounds how many times in a row a compute is done again
// because an invalidation came while it ran.
const maxRecomputes = 3

// computeFillAttempt is computeFill's attempt number attempt. A value (or
// "not found") whose tags, or namespace, were invalidated while it was
// computed neither answers nor is stored: it is computed again, still under
// its claim, with the counter read anew (up to maxRecomputes times, then
// its callers get [ErrInvalidated]). Every compute of fn with a
// generation, claimed or not, meets the invalidations here; servable
// checks its answer again as it reaches each caller, for an invalidation
// that returns while the value is being stored.
func (c *Cache[V]) computeFillAttempt(ctx context.Context, tasks []*task[V], fn batchFunc[V], attempt int) {
	settled := make([]bool, len(tasks)) // the claim was released by a fill, or handed to the next attempt
	defer func() {
		for i, t := range tasks {
			if !settled[i] {
				c.store.abandon(ctx, t.k, t.claim)
			}
		}
	}()
	stops := make([]func(), len(tasks))
	for i, t := range tasks {
		settled[i], stops[i] = t.unclaimed, func() {}
		if !t.unclaimed {
			stops[i] = c.store.keepAlive(ctx, t.claim)
		}
	}
	r := c.compute(c.withPrevious(ctx, tasks), taskKeys(tasks), fn)
	for _, stop := range stops {
		stop()
	}
	now := c.now()
	var reqs []fillReq[V]
	var filling []int    // the task of each fill
	var again []*task[V] // invalidated while computed
	for i, t := range tasks {
		t.res, t.err = c.computedFor(ctx, t.k.Key, r, t.prev, Miss)
		var e entry[V]
		var raw string // the value as stored already, when it is the previous one
		switch {
		case t.err == nil && t.res.outcome == Miss:
			e = entry[V]{value: t.res.value, w: r.policy.Write(now, 0, rand.Float64()), took: r.took, stamp: t.stampOf(r)}
			if errors.Is(r.err, ErrUnchanged) { // the previous value, revalidated
				raw = t.prevRaw
			}
		case errors.Is(t.err, ErrNotFound):
			e = entry[V]{w: c.policy.WriteNegative(now), negative: true, stamp: t.stampOf(r)}
		case t.err == nil && t.res.outcome == Stale && !t.unclaimed && c.opts.FailSafeThrottle > 0 && c.policy.State(t.prev.w, now, 0, 0) != stale.Fresh &&
			!errors.Is(t.res.cause, context.Canceled) && c.invalidation(ctx, *t.prev) != marks.Soft:
			// A compute cancelled (by Close) did not find the origin failing.
			// A failed early refresh leaves a fresh value alone. A value
			// ExpireTags expired stays expired re-armed (judge): no throttle
			// holds for it, so it is not re-armed.
			e, raw = *t.prev, t.prevRaw // its stamp too: an invalidation of it still applies
			e.w, e.failSafe = e.w.Rearm(now, c.opts.FailSafeThrottle), true
			c.stats.failSafe.Add(1)
			c.logRare(ctx, slog.LevelWarn, "stampede: compute failed; the stale value answers for the fleet until the fail-safe throttle ends", t.k.Key, t.res.cause)
		default:
			continue
		}
		if !e.failSafe {
			t.res.stamp = e.stamp
			if inv := c.invalidation(ctx, e); inv == marks.Hard || inv == marks.Soft {
				if attempt < maxRecomputes {
					settled[i] = true // the next attempt settles it
					again = append(again, t)
				} else {
					t.res, t.err = loaded[V]{}, fmt.Errorf("%w: %q", ErrInvalidated, t.k.Key)
				}
				continue
			}
		}
		if t.unclaimed { // computed after WaitTimeout: the holder stores it
			continue
		}
		reqs, filling = append(reqs, fillReq[V]{k: t.k, claim: t.claim, e: e, raw: raw}), append(filling, i)
	}
	version := c.l1version() // before the fill: no read before it can see the value
	var filled []fillResult
	if len(reqs) > 0 {
		filled = c.store.fillMany(ctx, reqs)
	}
	for i, fr := range filled {
		t := tasks[filling[i]]
		settled[filling[i]] = true // filled, fenced out, abandoned as unstorable, or retried in the background
		switch {
		case fr.stored && reqs[i].e.negative:
			c.stats.negativeStored.Add(1)
		case fr.stored && t.res.outcome == Miss:
			t.res.w, t.res.digest, t.res.size, t.res.took = reqs[i].e.w, fr.digest, fr.size, reqs[i].e.took
		case fr.fenced:
			c.fencedOut(ctx, t.k.Key)
		case fr.unstored != nil && t.res.outcome == Miss:
			t.res.cause = fr.unstored
			c.unstored(ctx, t.k.Key, fr.unstored)
		}
		if fr.stored {
			c.filledHere(t.k.Key, t.res, t.err, version)
		}
	}
	if len(again) == 0 {
		return
	}
	c.stats.recomputed.Add(uint64(len(again)))
	gen, err := c.store.readGen(ctx)
	if err != nil {
		// The store failed between two attempts: compute without it, as a
		// caller does whose claim failed (Outcome Degraded), never the
		// store's error.
		c.leadDegraded(ctx, again, fn)
		return
	}
	for _, t := range again {
		t.claim.gen, t.res, t.err = gen, loaded[V]{}, nil
		// The previous value is judged again, as a first attempt's is: one
		// the invalidation hard-invalidated with the compute is no previous
		// value any more, neither for Previous (an ErrUnchanged would re-arm
		// it) nor to stand in for a failure.
		if t.prev != nil && c.invalidation(ctx, *t.prev) == marks.Hard {
			t.prev, t.prevRaw = nil, ""
		}
	}
	c.computeFillAttempt(ctx, again, fn, attempt+1)
}

// stampOf is the stamp of what t's compute r stored: the generation read
// with t's claim, and the tags r's function attached (a previous value
// revalidated by ErrUnchanged keeps its own too).
func (t *task[V]) stampOf(r computed[V]) marks.Stamp {
	tags := r.tags
	if errors.Is(r.err, ErrUnchanged) && t.prev != nil && len(t.prev.stamp.Tags) > 0 {
		tags = unionTags(t.prev.stamp.Tags, r.tags)
	}
	return marks.Stamp{Gen: t.claim.gen, Tags: tags}
}

func taskKeys[V any](tasks []*task[V]) []string {
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[i] = t.k.Key
	}
	return names
}

// computedFor is what key's callers get from a compute's answer r: its
// value, or its error (a stale value inside its stale-if-error window
// answering for it); o is the outcome of a value. A value computed here
// has no created time: its callers' Result.Age is 0, however long the
// fill took.
func (c *Cache[V]) computedFor(ctx context.Context, key string, r computed[V], prev *entry[V], o Outcome) (loaded[V], error) {
	err := r.err
	if err == nil {
		if v, ok := r.values[key]; ok {
			return loaded[V]{value: v, outcome: o}, nil
		}
		err = ErrMissingFromBatch
	}
	if errors.Is(err, ErrUnchanged) && prev != nil && !prev.negative {
		c.stats.revalidated.Add(1) // the origin said the previous value is current: it is stored again, fresh
		return loaded[V]{value: prev.value, outcome: o}, nil
	}
	if errors.Is(err, ErrNotFound) {
		return loaded[V]{outcome: o}, err
	}
	return c.onError(ctx, prev, o, err)
}

// onError answers a failed compute with prev when it is inside its
// stale-if-error window and was not invalidated since it was read, and with
// the error otherwise.
func (c *Cache[V]) onError(ctx context.Context, prev *entry[V], o Outcome, err error) (loaded[V], error) {
	if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUncacheable) && c.mayStandIn(ctx, prev) {
		c.stats.staleOnError.Add(1)
		l := prev.loaded(Stale)
		l.cause = err
		return l, nil
	}
	return loaded[V]{outcome: o}, err
}

// fencedOut reports a fill the fence rejected.
func (c *Cache[V]) fencedOut(ctx context.Context, key string) {
	c.stats.fencedOut.Add(1)
	c.observe(ctx, Event{Kind: EventFencedOut, Key: key})
	c.logRare(ctx, slog.LevelInfo, "stampede: fill rejected by the fence (a newer lease, Set or Delete won)", key, nil)
}

// unstored reports a computed value that could not be stored: it still
// answers its callers (Result.Err says why), but the next call computes
// again.
func (c *Cache[V]) unstored(ctx context.Context, key string, err error) {
	c.stats.unstored.Add(1)
	c.observe(ctx, Event{Kind: EventUnstored, Key: key, Err: err})
	c.logRare(ctx, slog.LevelWarn, "stampede: computed value not stored; every call will compute it", key, err)
}
