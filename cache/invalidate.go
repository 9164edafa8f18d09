package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// InvalidateTags invalidates every entry of the namespace tagged with any of
// tags (see [SetTags] and [WithTags]), on every replica. After it returns
// nil, no caller anywhere in the fleet is served a value carrying one of
// tags whose compute began before the call: not from Redis, L1, a batch, a
// waiter's notification, a stale or fail-safe answer, nor a compute that
// was in flight during the call, whether it holds the lease or computes
// after WaitTimeout without it (OnBusy), and whether its value is still
// being computed or already being stored: its value is computed again
// (see [ErrInvalidated]), for its caller and for every caller of its
// process that shares it. Such entries are misses; nothing is deleted or
// scanned (each entry is checked when read, see docs/invalidation.md).
// A value computed while Redis was unreachable (Outcome Degraded) is
// reached only by this process's own invalidations.
//
// It takes about Options.InvalidationWait (default 100ms) plus two round
// trips: it waits for every replica's trust in the marks it read before to
// run out. If ctx ends first, it returns ctx's error: the invalidation may
// be under way (the error says how far it got), but is not
// guaranteed. When Redis is unreachable or fails a step while ctx is alive
// (the breaker open, connections refused, an error, a step past
// Options.RedisTimeout) it returns an error matching [ErrUnavailable] and no
// context error: the invalidation is not guaranteed, and this process only
// drops its L1 and what it computed during the outage; call it again once
// Redis answers. Nothing was invalidated when the breaker was open or the
// counter's step failed; a failure while the marks were being written (or
// of Clear's one step) may have raised some of them, which only refuses
// more, never less. Any number of tags may be given (the limit of 32 is per
// entry): their marks are raised in batches of 128, one round trip each; a
// failed batch ends the call with the batches before it written and the
// later ones not, and none of the tags is guaranteed until a call with all
// of them returns nil. Tags must satisfy [ErrInvalidTag]'s rule; no tag is
// a no-op.
func (c *Cache[V]) InvalidateTags(ctx context.Context, tags ...string) error {
	if ctx == nil {
		return ErrNilContext
	}
	if len(tags) == 0 { // not Clear
		return nil
	}
	return c.invalidate(ctx, tags, false)
}

// ExpireTags is the soft [Cache.InvalidateTags]: the tagged entries whose
// compute began before the call become expired instead of missing. They
// are recomputed on their next call like any expired entry (a value the
// fail-safe throttle re-armed too), and may still answer for a failing
// compute while inside their stale-if-error window, the one past their TTL
// (max(Stale, StaleIfError); with neither, never): stale-if-error, like
// FusionCache's Expire. The throttle does not re-arm them: while the
// origin fails, each call tries it again. InvalidateTags, the hard
// invalidation, is what most callers want.
func (c *Cache[V]) ExpireTags(ctx context.Context, tags ...string) error {
	if ctx == nil {
		return ErrNilContext
	}
	if len(tags) == 0 { // not Clear
		return nil
	}
	return c.invalidate(ctx, tags, true)
}

// Clear invalidates every entry of the namespace, on every replica, with
// the guarantee and cost of [Cache.InvalidateTags]: as if every entry
// carried one tag that Clear invalidates. Nothing is scanned or deleted:
// the entries expire in Redis on their own.
func (c *Cache[V]) Clear(ctx context.Context) error {
	return c.invalidate(ctx, nil, false)
}

// invalidate is InvalidateTags (tags), ExpireTags (soft) and Clear (nil
// tags).
func (c *Cache[V]) invalidate(ctx context.Context, tags []string, soft bool) error {
	if ctx == nil {
		return ErrNilContext
	}
	if c.closedFlag.Load() {
		return ErrClosed
	}
	if tags != nil {
		if err := checkEach(tags); err != nil {
			return err
		}
		tags = slices.Compact(slices.Sorted(slices.Values(tags)))
	}
	// This process's own values computed while Redis was unreachable are
	// dropped whatever happens next.
	c.keptFloor.Add(1)
	if c.kept != nil {
		c.kept.Clear()
	}
	if !c.store.availableWait(ctx) {
		c.applyLocally()
		return fmt.Errorf("cache: invalidate: %w", c.unavailable())
	}
	gen, err := c.store.invalidate(ctx, tags, soft)
	if err != nil {
		c.applyLocally()
		return storeFailed(ctx, err)
	}
	c.marks.RaiseAll(tags, gen, soft)
	if c.marks.Local {
		return nil
	}
	// Every replica trusts a mark for InvalidationWait after sending its
	// read: once that has passed since the write, none trusts a read that
	// did not see it.
	t := time.NewTimer(c.opts.InvalidationWait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cache: invalidate: marks written, trust window not over: %w", context.Cause(ctx))
	}
}

// applyLocally applies an invalidation that could not reach Redis to what
// this process holds on its own: its L1 is cleared (what it kept during an
// outage is already dropped). No mark is raised: without the counter's
// value, a mark raised here could refuse later values for good.
func (c *Cache[V]) applyLocally() {
	if c.l1 != nil {
		c.l1.clear()
	}
}

// SetTags attaches tags to the value being computed (and to a "not found"
// cached for it): [Cache.InvalidateTags] of any of them invalidates it. Tags
// accumulate over calls. Inside a [Cache.GetOrComputeMany] compute function
// they apply to every key of that call. Call it from within the compute
// function with the context it was given; for any other context it returns
// an error, as it does for a tag that breaks [ErrInvalidTag]'s rule.
func SetTags(ctx context.Context, tags ...string) error {
	m := metaFrom(ctx)
	if m == nil {
		return errors.New("cache: SetTags called outside a compute function")
	}
	if err := checkEach(tags); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	all := unionTags(m.tags, tags)
	if len(all) > maxTags {
		return fmt.Errorf("%w: %d tags, limit %d", ErrInvalidTag, len(all), maxTags)
	}
	m.tags = all
	return nil
}

// unionTags returns the sorted union of a and b (a new slice).
func unionTags(a, b []string) []string {
	if len(b) == 0 {
		return a
	}
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
