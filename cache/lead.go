package cache

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/stampede-go/stampede/stale"
)

// task is one key a leader holds the claim of, and what became of it.
type task[V any] struct {
	k     keys
	claim claim[V]
	prev  *entry[V] // answers if the compute fails (stale-if-error)
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
	settled := make([]bool, len(tasks)) // the claim was released, by a fill or an abandon
	defer func() {
		for i, t := range tasks {
			if !settled[i] {
				c.store.abandon(ctx, t.k, t.claim)
			}
		}
	}()
	// The previous holder may have filled between our read and our claim
	// (the Redis claim re-read the key in the same step).
	ks := make([]keys, len(tasks))
	cls := make([]claim[V], len(tasks))
	for i, t := range tasks {
		ks[i], cls[i] = t.k, t.claim
	}
	done := make([]bool, len(tasks))
	now := c.now()
	err := reread(ctx, c.store, ks, cls, func(i int, e entry[V], found bool) {
		if !found {
			return
		}
		t := tasks[i]
		state := c.policy.State(e.w, now, 0, 0)
		// Done when someone else filled since the entry that brought us here:
		// on a miss (after is zero) only a fresh fill counts; a refresh is
		// done by any newer entry.
		if e.w.Created.After(t.after) && (!t.after.IsZero() || state == stale.Fresh) {
			t.res, done[i] = e.loaded(Hit), true
			return
		}
		if state != stale.Gone {
			t.prev = &e
		}
	})
	names := make([]string, 0, len(tasks))
	var todo []int // indexes of the tasks to compute
	for i, t := range tasks {
		if !done[i] {
			names = append(names, t.k.key)
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return
	}
	if err != nil { // the store failed: compute without it; the claims are abandoned
		r, err := c.computeDegraded(ctx, names, fn)
		for _, i := range todo {
			t := tasks[i]
			t.res, t.err = loaded[V]{}, err
			if err == nil {
				t.res, t.err = c.computedFor(t.k.key, r, t.prev, Degraded, c.now())
			}
		}
		return
	}
	stops := make([]func(), len(todo))
	for j, i := range todo {
		stops[j] = c.store.keepAlive(ctx, tasks[i].claim)
	}
	r := c.compute(ctx, names, fn)
	for _, stop := range stops {
		stop()
	}
	now = c.now()
	var reqs []fillReq[V]
	var filling []int // the task of each fill
	for _, i := range todo {
		t := tasks[i]
		t.res, t.err = c.computedFor(t.k.key, r, t.prev, Miss, now)
		switch {
		case t.err == nil && t.res.outcome == Miss:
			e := entry[V]{value: t.res.value, w: r.policy.Write(now, 0, rand.Float64()), took: r.took}
			reqs, filling = append(reqs, fillReq[V]{k: t.k, claim: t.claim, e: e}), append(filling, i)
		case errors.Is(t.err, ErrNotFound):
			e := entry[V]{w: c.policy.WriteNegative(now), negative: true}
			reqs, filling = append(reqs, fillReq[V]{k: t.k, claim: t.claim, e: e}), append(filling, i)
		}
	}
	if len(reqs) == 0 {
		return
	}
	results := c.store.fillMany(ctx, reqs)
	for i, fr := range results {
		t := tasks[filling[i]]
		settled[filling[i]] = true // filled, fenced out, abandoned as unstorable, or retried in the background
		switch {
		case fr.stored && reqs[i].e.negative:
			c.stats.negativeStored.Add(1)
		case fr.stored:
			t.res.w = reqs[i].e.w
		case fr.fenced:
			c.fencedOut(ctx, t.k.key)
		case fr.unstored != nil:
			t.res.cause = fr.unstored
			c.unstored(ctx, t.k.key, fr.unstored)
		}
	}
}

// computedFor is what key's callers get from a compute's answer r: its
// value, or its error (a stale value inside its stale-if-error window
// answering for it); o is the outcome of a value.
func (c *Cache[V]) computedFor(key string, r computed[V], prev *entry[V], o Outcome, now time.Time) (loaded[V], error) {
	err := r.err
	if err == nil {
		if v, ok := r.values[key]; ok {
			return loaded[V]{value: v, outcome: o, created: now}, nil
		}
		err = ErrMissingFromBatch
	}
	if errors.Is(err, ErrNotFound) {
		return loaded[V]{outcome: o, created: now}, err
	}
	return c.onError(prev, o, err)
}

// onError answers a failed compute with prev when it is inside its
// stale-if-error window, and with the error otherwise.
func (c *Cache[V]) onError(prev *entry[V], o Outcome, err error) (loaded[V], error) {
	if prev != nil && !prev.negative && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUncacheable) && prev.w.UsableOnError(c.now()) {
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
