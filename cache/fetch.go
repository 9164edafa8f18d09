package cache

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/stampede-go/stampede/lease"
	"github.com/stampede-go/stampede/stale"
)

// loaded is what one shared load hands to every caller waiting on it.
type loaded[V any] struct {
	value    V
	outcome  Outcome
	created  time.Time
	negative bool          // a cached "not found"
	cause    error         // the origin's error when a stale value answered for it
	w        stale.Windows // the value's windows, when known (for L1)
}

func (e entry[V]) loaded(o Outcome) loaded[V] {
	return loaded[V]{value: e.value, outcome: o, created: e.w.Created, negative: e.negative, w: e.w}
}

func (c *Cache[V]) fetch(ctx context.Context, key string, fn, fallback func(context.Context) (V, error)) (Result[V], error) {
	if err := c.check(key); err != nil {
		return Result[V]{}, err
	}
	if fn == nil {
		return Result[V]{}, ErrNilFunc
	}
	if c.l1 != nil {
		now := time.Now()
		if e, ok := c.l1.get(key, now); ok { // the L1 hit path: a map read and two counters
			return c.hit(ctx, key, e, now, true)
		}
	}
	if c.rdb != nil && !c.brk.allow() {
		return c.coalesce(ctx, key, func(sctx context.Context) (loaded[V], error) {
			return c.computeDegraded(sctx, key, fn, nil)
		})
	}
	// The hit path: one read and a decode, no coalescing, no lease.
	e, found, err := c.lookup(ctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return Result[V]{}, err
		}
		return c.coalesce(ctx, key, func(sctx context.Context) (loaded[V], error) {
			return c.computeDegraded(sctx, key, fn, nil)
		})
	}
	var prev *entry[V]
	if found {
		now := time.Now()
		switch c.policy.State(e.w, now, e.took, rand.Float64()) {
		case stale.Fresh:
			c.l1put(key, e)
			return c.hit(ctx, key, e, now, false)
		case stale.RefreshEarly:
			c.refreshAsync(key, e, fn)
			return c.answer(ctx, key, e.loaded(Hit), nil)
		case stale.Stale:
			c.refreshAsync(key, e, fn)
			return c.answer(ctx, key, e.loaded(Stale), nil)
		case stale.Expired:
			expired := e    // a copy, so e stays on the stack on the hit path
			prev = &expired // answers if the recompute fails
		}
	}
	return c.coalesce(ctx, key, func(sctx context.Context) (loaded[V], error) {
		return c.load(sctx, key, fn, fallback, prev)
	})
}

// coalesce runs load once for all concurrent callers of key in the process.
func (c *Cache[V]) coalesce(ctx context.Context, key string, load func(context.Context) (loaded[V], error)) (Result[V], error) {
	led := false
	r, _, err := c.sf.Do(ctx, key, func(sctx context.Context) (loaded[V], error) {
		led = true
		return load(sctx)
	})
	if r.outcome == 0 { // this caller's wait ended early, or the load failed before an outcome
		return Result[V]{}, err
	}
	if !led && r.outcome == Miss {
		r.outcome = Shared
	}
	if err == nil && r.cause == nil && r.outcome != Stale && r.outcome != Degraded && r.outcome != Fallback && !r.w.FreshUntil.IsZero() {
		c.l1put(key, entry[V]{value: r.value, w: r.w, negative: r.negative})
	}
	return c.answer(ctx, key, r, err)
}

// hit answers a caller from a fresh entry read at now, from L1 or Redis,
// without building a shared load: this is the hot path.
func (c *Cache[V]) hit(ctx context.Context, key string, e entry[V], now time.Time, fromL1 bool) (Result[V], error) {
	if fromL1 {
		c.stats.l1Hit()
	} else {
		c.stats.outcome(Hit)
	}
	if c.opts.Observer != nil {
		c.observe(ctx, Event{Kind: EventOutcome, Key: key, Outcome: Hit, Negative: e.negative})
	}
	res := Result[V]{Value: e.value, Outcome: Hit, Age: max(now.Sub(e.w.Created), 0)}
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
		res.Age = max(time.Since(r.created), 0)
	}
	if r.negative && err == nil {
		c.stats.negativeHits.Add(1)
		err = errCachedNotFound
	}
	return res, err
}

// load runs once per process for a missing or expired key.
func (c *Cache[V]) load(ctx context.Context, key string, fn, fallback func(context.Context) (V, error), prev *entry[V]) (loaded[V], error) {
	if c.rdb == nil {
		// Another caller may have stored it between our read and now.
		if e, ok := c.local.get(key, time.Now()); ok && c.policy.State(e.w, time.Now(), 0, 0) == stale.Fresh {
			return e.loaded(Hit), nil
		}
		return c.computeLocal(ctx, key, fn, prev)
	}
	k := c.keysFor(key)
	l, err := c.acquire(ctx, k)
	if err == nil {
		return c.lead(ctx, k, l, fn, prev, time.Time{})
	}
	var busy *lease.BusyError
	if errors.As(err, &busy) {
		return c.wait(ctx, k, fn, fallback, prev, busy.Remaining)
	}
	c.redisFailed(ctx, err)
	return c.computeDegraded(ctx, k.key, fn, prev)
}

// lead computes the value while holding the lease and fills it.
//
// A fresh entry found on re-reading counts as done only when it was written
// after the entry that triggered this compute (after is zero on a miss),
// so an early refresh is not mistaken for someone else's.
func (c *Cache[V]) lead(ctx context.Context, k keys, l *lease.Lease, fn func(context.Context) (V, error), prev *entry[V], after time.Time) (loaded[V], error) {
	filled := false
	defer func() {
		if !filled { // fn failed, panicked or called runtime.Goexit: do not leave the key locked
			c.abandon(ctx, k, l)
		}
	}()
	// The previous holder may have filled between our read and our acquisition.
	e, found, err := c.readRedis(ctx, k, false)
	if err != nil {
		return c.computeDegraded(ctx, k.key, fn, prev)
	}
	if found {
		state := c.policy.State(e.w, time.Now(), 0, 0)
		// Done when someone else filled since the entry that brought us here:
		// on a miss (after is zero) only a fresh fill counts; a refresh is
		// done by any newer entry.
		if e.w.Created.After(after) && (!after.IsZero() || state == stale.Fresh) {
			return e.loaded(Hit), nil
		}
		if state != stale.Gone {
			prev = &e
		}
	}
	_, stop := l.KeepAlive(ctx)
	defer stop() // also on runtime.Goexit in fn
	r := c.compute(ctx, k.key, fn)
	_ = stop() // a lost lease does not matter here: the fence decides the fill
	if r.err != nil {
		if errors.Is(r.err, ErrNotFound) {
			filled = c.fillNegative(ctx, k, l)
			return loaded[V]{outcome: Miss, created: time.Now()}, r.err
		}
		return c.onError(prev, Miss, r.err)
	}
	now := time.Now()
	w := r.policy.Write(now, 0, rand.Float64())
	stored, err := c.fill(ctx, k, l, entry[V]{value: r.value, w: w, took: r.took})
	filled = err == nil || stored
	res := loaded[V]{value: r.value, outcome: Miss, created: now}
	if stored {
		res.w = w
	}
	return res, err
}

// onError answers a failed compute with prev when it is inside its
// stale-if-error window, and with the error otherwise.
func (c *Cache[V]) onError(prev *entry[V], o Outcome, err error) (loaded[V], error) {
	if prev != nil && !prev.negative && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUncacheable) && prev.w.UsableOnError(time.Now()) {
		c.stats.staleOnError.Add(1)
		l := prev.loaded(Stale)
		l.cause = err
		return l, nil
	}
	return loaded[V]{outcome: o}, err
}

// computed is one run of a compute function.
type computed[V any] struct {
	value V
	err   error
	took  time.Duration
	// policy is the cache's, with what fn set by SetTTL and SetStale.
	policy stale.Policy
}

// compute runs fn bounded by ComputeTimeout, turning a panic into a
// *PanicError.
func (c *Cache[V]) compute(ctx context.Context, key string, fn func(context.Context) (V, error)) (r computed[V]) {
	cctx, cancel := context.WithTimeout(ctx, c.opts.ComputeTimeout)
	defer cancel()
	meta := newComputeMeta()
	cctx = context.WithValue(cctx, computeMetaKey, meta)
	c.stats.computes.Add(1)
	start := time.Now()
	defer func() {
		r.took = time.Since(start)
		if p := recover(); p != nil {
			r.err = &PanicError{Value: p, Stack: debug.Stack()}
		}
		if r.err != nil && !errors.Is(r.err, ErrNotFound) && !errors.Is(r.err, ErrUncacheable) {
			c.stats.computeErrors.Add(1)
		}
		r.policy = meta.policy(c.policy)
		if c.opts.Observer != nil {
			c.observe(ctx, Event{Kind: EventCompute, Key: key, Duration: r.took, Err: r.err})
		}
	}()
	r.value, r.err = fn(cctx)
	return r
}

// wait waits for the replica holding the lease to fill the key, taking the
// lease over if the holder dies, until WaitTimeout.
func (c *Cache[V]) wait(ctx context.Context, k keys, fn, fallback func(context.Context) (V, error), prev *entry[V], remaining time.Duration) (res loaded[V], err error) {
	if c.opts.Observer != nil {
		start := time.Now()
		defer func() {
			c.observe(ctx, Event{Kind: EventWait, Key: k.key, Duration: time.Since(start), Outcome: res.outcome, Err: err})
		}()
	}
	wctx, cancel := context.WithTimeout(ctx, c.opts.WaitTimeout)
	defer cancel()
	// Subscribe before re-reading, so that a fill between the two cannot be
	// missed. If subscribing fails, polling still finds the value.
	w, _ := c.notify.subscribe(wctx, k.channel)
	defer w.close()
	for attempt := 0; wctx.Err() == nil; attempt++ {
		// Reads are bounded by the wait: a master that died mid-read must
		// not hold the caller past WaitTimeout.
		e, found, err := c.readWaiting(wctx, k)
		// Redis failed (a failover, a restart) while another replica
		// computes: keep waiting, as its fill retries until Redis answers,
		// unless this process already counts Redis as down.
		if err != nil && wctx.Err() == nil && c.waitFailed(ctx, err) {
			return c.computeDegraded(ctx, k.key, fn, prev)
		}
		if found {
			switch c.policy.State(e.w, time.Now(), 0, 0) {
			case stale.Fresh:
				return e.loaded(Waited), nil
			case stale.Stale:
				return e.loaded(Stale), nil
			case stale.Expired:
				prev = &e
			}
		}
		if attempt > 0 && err == nil {
			// Still nothing: the holder may have died or given up.
			l, err := c.acquire(wctx, k)
			var busy *lease.BusyError
			switch {
			case err == nil:
				return c.lead(ctx, k, l, fn, prev, time.Time{})
			case errors.As(err, &busy):
				remaining = busy.Remaining
			case wctx.Err() != nil:
			case c.waitFailed(ctx, err):
				return c.computeDegraded(ctx, k.key, fn, prev)
			}
		}
		t := time.NewTimer(c.pollDelay(attempt, remaining))
		select {
		case <-w.C:
		case <-t.C:
		case <-wctx.Done():
		}
		t.Stop()
	}
	if ctx.Err() != nil {
		return loaded[V]{}, context.Cause(ctx)
	}
	return c.busy(ctx, k.key, fn, fallback, prev)
}

// waitFailed records a Redis failure seen by a waiter and reports whether
// to stop waiting and compute locally: only when the breaker is open (other
// calls found Redis down). A waiter's own failures do not trip the breaker:
// a failover makes every waiter fail at once for a moment, and the holder's
// fill lands when Redis answers again.
func (c *Cache[V]) waitFailed(ctx context.Context, err error) bool {
	c.noteRedisError(ctx, err)
	return c.brk.open()
}

// pollDelay is the safety-net poll interval: capped exponential with jitter,
// and no later than just after the holder's lease would run out.
func (c *Cache[V]) pollDelay(attempt int, remaining time.Duration) time.Duration {
	maxD := c.opts.PollInterval
	d := max(maxD/16, time.Millisecond)
	for range min(attempt, 16) {
		d *= 2
	}
	d = min(d, maxD)
	d = d/2 + rand.N(d/2+1)
	if remaining > 0 {
		d = min(d, remaining+time.Millisecond)
	}
	return d
}

// busy applies the contention policy after WaitTimeout.
func (c *Cache[V]) busy(ctx context.Context, key string, fn, fallback func(context.Context) (V, error), prev *entry[V]) (loaded[V], error) {
	if fallback != nil {
		r := c.compute(ctx, key, fallback)
		return loaded[V]{value: r.value, outcome: Fallback, created: time.Now()}, r.err
	}
	if c.opts.OnBusy == BusyError {
		return c.onError(prev, 0, ErrLeaseBusy)
	}
	r := c.compute(ctx, key, fn)
	if r.err != nil {
		return c.onError(prev, Miss, r.err)
	}
	return loaded[V]{value: r.value, outcome: Miss, created: time.Now()}, nil
}

// computeDegraded computes without Redis, bounded by MaxDegradedComputes.
func (c *Cache[V]) computeDegraded(ctx context.Context, key string, fn func(context.Context) (V, error), prev *entry[V]) (loaded[V], error) {
	if c.sem != nil {
		if err := c.sem.Acquire(ctx, 1); err != nil {
			return loaded[V]{}, err
		}
		defer c.sem.Release(1)
	}
	r := c.compute(ctx, key, fn)
	if r.err != nil {
		return c.onError(prev, Degraded, r.err)
	}
	return loaded[V]{value: r.value, outcome: Degraded, created: time.Now()}, nil
}

// computeLocal computes and stores a value in process-local mode.
func (c *Cache[V]) computeLocal(ctx context.Context, key string, fn func(context.Context) (V, error), prev *entry[V]) (loaded[V], error) {
	r := c.compute(ctx, key, fn)
	now := time.Now()
	if r.err != nil {
		if errors.Is(r.err, ErrNotFound) {
			c.stats.negativeStored.Add(1)
			c.local.put(key, entry[V]{w: c.policy.WriteNegative(now), negative: true})
			return loaded[V]{outcome: Miss, created: now}, r.err
		}
		return c.onError(prev, Miss, r.err)
	}
	c.local.put(key, entry[V]{value: r.value, w: r.policy.Write(now, 0, rand.Float64()), took: r.took})
	return loaded[V]{value: r.value, outcome: Miss, created: now}, nil
}

// refreshAsync recomputes a stale (or early-refreshing) entry seen in the
// background, once per key in the process and, through the lease, once in
// the fleet. A failed refresh leaves the entry as it is.
func (c *Cache[V]) refreshAsync(key string, seen entry[V], fn func(context.Context) (V, error)) {
	c.goBackground(key, func(ctx context.Context) {
		if c.rdb == nil {
			c.stats.refreshes.Add(1)
			_, _ = c.computeLocal(ctx, key, fn, nil)
			return
		}
		k := c.keysFor(key)
		l, err := c.acquire(ctx, k)
		if err != nil {
			if !errors.Is(err, lease.ErrLeaseBusy) {
				c.redisFailed(ctx, err)
			}
			return
		}
		c.stats.refreshes.Add(1)
		_, _ = c.lead(ctx, k, l, fn, nil, seen.w.Created)
	})
}

// acquire tries key's lease once, reporting the attempt.
func (c *Cache[V]) acquire(ctx context.Context, k keys) (*lease.Lease, error) {
	start := time.Now()
	l, err := c.leases.Acquire(ctx, k.name, c.opts.LeaseTTL)
	if c.opts.Observer != nil {
		switch {
		case err == nil:
			c.observe(ctx, Event{Kind: EventLeaseAcquired, Key: k.key, Duration: time.Since(start)})
		case errors.Is(err, lease.ErrLeaseBusy):
			c.observe(ctx, Event{Kind: EventLeaseBusy, Key: k.key})
		}
	}
	return l, err
}
