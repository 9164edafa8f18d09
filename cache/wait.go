package cache

import (
	"context"
	"math/rand/v2"
	"time"
)

// wait waits for the owner of key's claim (another replica, or a
// background refresh) to fill it, taking the claim over if the holder dies
// or gives up, until WaitTimeout; then OnBusy applies. lost is the claim
// attempt that found the key held.
func (c *Cache[V]) wait(ctx context.Context, k keys, fn, fallback batchFunc[V], prev *entry[V], lost claimed[V]) (res loaded[V], err error) {
	if c.opts.Observer != nil {
		start := time.Now()
		defer func() {
			c.observe(ctx, Event{Kind: EventWait, Key: k.Key, Duration: time.Since(start), Outcome: res.outcome, Err: err})
		}()
	}
	// The namespace's invalidation counter as the latest claim attempt read
	// it: the generation of a compute after the wait (OnBusy).
	remaining, gen := lost.remaining, lost.claim.gen
	wctx, cancel := context.WithTimeout(ctx, c.opts.WaitTimeout)
	defer cancel()
	// Subscribe before re-reading, so that a fill between the two cannot be
	// missed. If subscribing fails, polling still finds the value.
	sub, _ := c.store.subscribe(wctx, k)
	defer sub.close()
	// SoftTimeout bounds a wait as it bounds a compute, while a value that
	// may answer for the compute exists.
	var soft <-chan time.Time
	if c.opts.SoftTimeout > 0 {
		t := time.NewTimer(c.opts.SoftTimeout)
		defer t.Stop()
		soft = t.C
	}
	for attempt := 0; wctx.Err() == nil; attempt++ {
		// Reads are bounded by the wait: a master that died mid-read must
		// not hold the caller past WaitTimeout.
		e, found, err := c.store.readNotified(wctx, k, sub)
		// Redis failed (a failover, a restart) while another replica
		// computes: keep waiting, as its fill retries until Redis answers,
		// unless this process already counts Redis as down. A waiter's own
		// failures do not trip the breaker: a failover makes every waiter
		// fail at once for a moment.
		if err != nil && wctx.Err() == nil && c.brk.Open() {
			return c.degraded(ctx, k, fn, prev)
		}
		switch v, _ := c.judge(wctx, &e, found, c.now()); v {
		case verdictHit, verdictEarly:
			return e.loaded(Waited), nil
		case verdictStale, verdictFailSafe:
			return e.loaded(Stale), nil
		case verdictExpired:
			prev = &e
		}
		if attempt > 0 && err == nil {
			// Still nothing: the holder may have died or given up.
			cl := c.store.claimMany(wctx, []keys{k})[0]
			switch {
			case cl.won:
				return c.leadOne(ctx, k, cl.claim, fn, prev, time.Time{})
			case cl.err == nil:
				remaining, gen = cl.remaining, cl.claim.gen
			case wctx.Err() == nil && c.brk.Open():
				return c.degraded(ctx, k, fn, prev)
			}
		}
		t := time.NewTimer(c.pollDelay(attempt, remaining))
		select {
		case <-sub.ready():
		case <-t.C:
		case <-wctx.Done():
		case <-soft:
			soft = nil // fires once
			if c.mayStandIn(ctx, prev) {
				t.Stop()
				c.stats.softTimeouts.Add(1)
				l := prev.loaded(Stale)
				l.cause = ErrSoftTimeout
				return l, nil
			}
		}
		t.Stop()
	}
	if ctx.Err() != nil {
		return loaded[V]{}, context.Cause(ctx)
	}
	return c.busy(ctx, k, gen, fn, fallback, prev)
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

// busy applies the contention policy after WaitTimeout. BusyCompute
// computes without the claim, so nothing is stored, but the compute is
// fenced as a lead's is (see computeFillAttempt): stamped with gen, read
// before it began, and computed again when an invalidation came while it
// ran. A fallback's value is not fn's: no invalidation applies to it.
func (c *Cache[V]) busy(ctx context.Context, k keys, gen uint64, fn, fallback batchFunc[V], prev *entry[V]) (loaded[V], error) {
	if fallback != nil {
		return c.fallback(ctx, k, fallback)
	}
	if c.opts.OnBusy == BusyError {
		return c.onError(ctx, prev, 0, ErrLeaseBusy)
	}
	t := &task[V]{k: k, claim: claim[V]{k: k, gen: gen}, unclaimed: true, prev: prev}
	c.computeFill(ctx, []*task[V]{t}, fn)
	return t.res, t.err
}

// fallback answers a caller that may not wait any longer with its
// fallback's value (Outcome Fallback): no invalidation applies to it, and
// it is never stored.
func (c *Cache[V]) fallback(ctx context.Context, k keys, fallback batchFunc[V]) (loaded[V], error) {
	r := c.compute(ctx, []string{k.Key}, fallback)
	return loaded[V]{value: r.values[k.Key], outcome: Fallback}, r.err
}
