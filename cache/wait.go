package cache

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/stampede-go/stampede/singleflight"
)

// wait waits for the owner of key's claim (another replica, or a
// background refresh) to fill it, taking the claim over if the holder dies
// or gives up, until WaitTimeout; then OnBusy applies. lost is the claim
// attempt that found the key held.
//
// The fill's notification carries the value, and answers the moment it
// arrives: the safety-net poll (a read, then a claim attempt) runs on a
// goroutine of its own, so a poll in flight does not hold the waiter up
// by its round trips. Such a poll is left to end in the background (see
// dropPoll).
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
	var inflight <-chan singleflight.Outcome[polled[V]] // the poll whose answer has not come
	defer func() {
		if inflight != nil {
			go c.dropPoll(ctx, k, inflight, cancel)
			return
		}
		cancel()
	}()
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
	standIn := func() (loaded[V], bool) {
		soft = nil // fires once
		if !c.mayStandIn(ctx, prev) {
			return loaded[V]{}, false
		}
		c.stats.softTimeouts.Add(1)
		l := prev.loaded(Stale)
		l.cause = ErrSoftTimeout
		return l, true
	}
	for attempt := 0; wctx.Err() == nil; attempt++ {
		// The heartbeat runs while the caller waits (see Cache.beat): a
		// wait, unlike a lone decision, needs the marks' trust at a moment
		// it cannot know, and a stampede's waiters are few and brief.
		if c.beat != nil {
			c.beat()
		}
		// A notification that carried the value answers without a round trip.
		if e, ok := c.store.notified(wctx, k, sub); ok {
			if l, done := c.waited(wctx, &e, &prev); done {
				return l, nil
			}
		}
		// The poll: a read, and from the second on, a claim attempt when
		// the read found nothing (the holder may have died or given up).
		// Reads are bounded by the wait: a master that died mid-read must
		// not hold the caller past WaitTimeout.
		inflight = c.poll(wctx, k, attempt > 0)
		woken := false
	polling:
		for {
			select {
			case o := <-inflight:
				inflight = nil
				if o.Err != nil { // the codec panicked
					return loaded[V]{}, o.Err
				}
				p := o.Value
				// Redis failed (a failover, a restart) while another replica
				// computes: keep waiting, as its fill retries until Redis
				// answers, unless this process already counts Redis as down.
				// A waiter's own failures do not trip the breaker: a
				// failover makes every waiter fail at once for a moment.
				if p.err != nil && wctx.Err() == nil && c.brk.Open() {
					return c.degraded(ctx, k, fn, prev)
				}
				if p.err == nil {
					if l, done := c.waitedVerdict(p.v, &p.e, &prev); done {
						return l, nil
					}
				}
				if p.claimed {
					switch cl := p.cl; {
					case cl.won && cl.claim.reread && cl.claim.found:
						// The holder filled just before this claim: the value the
						// claim read answers at once, and the claim is released
						// in the background (the waiter does not wait for it).
						seen := cl.claim.seen
						if l, done := c.waited(wctx, &seen, &prev); done {
							go c.store.abandon(context.WithoutCancel(ctx), k, cl.claim)
							return l, nil
						}
						return c.leadOne(ctx, k, cl.claim, fn, prev, time.Time{})
					case cl.won:
						return c.leadOne(ctx, k, cl.claim, fn, prev, time.Time{})
					case cl.err == nil:
						remaining, gen = cl.remaining, cl.claim.gen
					case wctx.Err() == nil && c.brk.Open():
						return c.degraded(ctx, k, fn, prev)
					}
				}
				break polling
			case <-sub.ready():
				if e, ok := c.store.notified(wctx, k, sub); ok {
					if l, done := c.waited(wctx, &e, &prev); done {
						return l, nil
					}
				}
				// Woken without a value (an abandon, a Delete, a value too
				// large to carry): the read in flight may have been answered
				// before that, so read again once it is done.
				woken = true
			case <-wctx.Done():
				break polling
			case <-soft:
				if l, ok := standIn(); ok {
					return l, nil
				}
			}
		}
		if woken || wctx.Err() != nil {
			continue
		}
		t := time.NewTimer(c.pollDelay(attempt, remaining))
		select {
		case <-sub.ready():
		case <-t.C:
		case <-wctx.Done():
		case <-soft:
			if l, ok := standIn(); ok {
				t.Stop()
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

// polled is what one safety-net poll of a waiter found: the entry read
// and its verdict (when err is nil), and the claim attempt's result when
// one was made (claimed).
type polled[V any] struct {
	e       entry[V]
	v       verdict
	err     error
	claimed bool
	cl      claimed[V]
}

// poll reads k and judges what it read, then, when claim is set and the
// read found nothing that answers, tries to claim k; on a goroutine of its
// own, whose outcome the returned channel receives (a panic of the codec
// as its error).
func (c *Cache[V]) poll(ctx context.Context, k keys, claim bool) <-chan singleflight.Outcome[polled[V]] {
	return singleflight.Go(ctx, func(ctx context.Context) (polled[V], error) {
		var p polled[V]
		var found bool
		p.e, found, p.err = c.store.read(ctx, k, readWaiting)
		if p.err != nil {
			return p, nil
		}
		p.v, _ = c.judge(ctx, &p.e, found, c.now())
		if claim && !answers(p.v) {
			p.cl, p.claimed = c.store.claimMany(ctx, []keys{k})[0], true
		}
		return p, nil
	})
}

// answers reports whether a waiter answers with an entry judged v.
func answers(v verdict) bool {
	switch v {
	case verdictHit, verdictEarly, verdictStale, verdictFailSafe:
		return true
	}
	return false
}

// waited judges an entry a notification carried for a waiter, as
// waitedVerdict says.
func (c *Cache[V]) waited(ctx context.Context, e *entry[V], prev **entry[V]) (loaded[V], bool) {
	v, _ := c.judge(ctx, e, true, c.now())
	return c.waitedVerdict(v, e, prev)
}

// waitedVerdict is a waiter's answer with entry e judged v, if it answers
// (done); an expired e becomes the value that may stand in for a failed
// compute (*prev).
func (c *Cache[V]) waitedVerdict(v verdict, e *entry[V], prev **entry[V]) (loaded[V], bool) {
	switch v {
	case verdictHit, verdictEarly:
		return e.loaded(Waited), true
	case verdictStale, verdictFailSafe:
		return e.loaded(Stale), true
	case verdictExpired:
		*prev = e
	}
	return loaded[V]{}, false
}

// dropPoll waits in the background for a poll that a waiter no longer
// needs (a notification answered first) and releases the claim it may
// have won (the holder's fill had freed the key: the abandon wakes the
// other waiters, who find the value); then it cancels the wait's context,
// which the poll ran under: a claim cut short would leave a lease that
// nobody fills.
func (c *Cache[V]) dropPoll(ctx context.Context, k keys, inflight <-chan singleflight.Outcome[polled[V]], cancel context.CancelFunc) {
	defer cancel()
	if o := <-inflight; o.Err == nil && o.Value.claimed && o.Value.cl.won {
		c.store.abandon(context.WithoutCancel(ctx), k, o.Value.cl.claim)
	}
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
