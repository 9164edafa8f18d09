package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/singleflight"
	"github.com/stampede-go/stampede/stale"
)

// batchFunc computes the values of keys; every compute, of one key or of a
// batch, runs as one.
type batchFunc[V any] func(ctx context.Context, keys []string) (map[string]V, error)

// one turns a single key's compute function into a batchFunc. Its value is
// kept beside an error (a fallback's answer, say).
func one[V any](key string, fn func(context.Context) (V, error)) batchFunc[V] {
	return func(ctx context.Context, _ []string) (map[string]V, error) {
		v, err := fn(ctx)
		return map[string]V{key: v}, err
	}
}

// computed is one run of a compute function.
type computed[V any] struct {
	values map[string]V
	err    error
	took   time.Duration
	// policy is the cache's, with what fn set by SetTTL and SetStale.
	policy stale.Policy
	// tags are what fn attached with SetTags.
	tags []string
}

// compute runs fn for keys bounded by ComputeTimeout: a panic becomes a
// *PanicError, runtime.Goexit an error, and a fn that outlives a deadline
// (ComputeTimeout, or a background refresh's RefreshTimeout) while
// ignoring its context is left to finish in the background while its
// callers are released with the context's error. When ctx is cancelled
// (Close cancels background work) compute waits for fn, which is told by
// its context, so that Close returns after the work it cancelled.
func (c *Cache[V]) compute(ctx context.Context, keys []string, fn batchFunc[V]) (r computed[V]) {
	cctx, cancel := context.WithTimeout(ctx, c.opts.ComputeTimeout)
	defer cancel()
	meta := newComputeMeta()
	cctx = context.WithValue(cctx, computeMetaKey, meta)
	c.stats.computes.Add(1)
	start := time.Now()
	done := singleflight.Go(cctx, func(ctx context.Context) (map[string]V, error) { return fn(ctx, keys) })
	var o singleflight.Outcome[map[string]V]
	select {
	case o = <-done:
	case <-cctx.Done():
		select {
		case o = <-done: // it did return in time
		default:
			if !errors.Is(cctx.Err(), context.DeadlineExceeded) && awaitCancelled(cctx, done, &o) {
				break // cancelled, not timed out: fn was told, and returned
			}
			o.Err = fmt.Errorf("cache: compute of %q abandoned: %w", keys[0], context.Cause(cctx))
		}
	}
	if o.Err != nil && !errors.Is(o.Err, ErrComputeTimeout) && errors.Is(o.Err, context.DeadlineExceeded) &&
		errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		// The compute's own bound, not its callers' context (who would
		// read a bare deadline error as their own): fn ignored its context
		// and was abandoned, or honoured it and returned its deadline's
		// error.
		o.Err = fmt.Errorf("cache: compute of %q ran past ComputeTimeout: %w (%s): %w", keys[0], ErrComputeTimeout, c.opts.ComputeTimeout, o.Err)
	}
	r.values, r.err = o.Value, o.Err
	r.took = time.Since(start)
	if r.err != nil && !errors.Is(r.err, ErrNotFound) && !errors.Is(r.err, ErrUncacheable) && !errors.Is(r.err, ErrUnchanged) {
		c.stats.computeErrors.Add(1)
	}
	r.policy, r.tags = meta.policy(c.policy), meta.tagList()
	if c.opts.Observer != nil {
		c.observe(ctx, Event{Kind: EventCompute, Key: keys[0], Duration: r.took, Err: r.err})
	}
	return r
}

// awaitCancelled waits for a cancelled compute's fn, which was told by its
// context, until the compute's deadline at the latest, so that Close
// returns after the work it cancelled but never hangs on an fn that
// ignores its context. It reports whether fn returned (into o).
func awaitCancelled[T any](cctx context.Context, done <-chan singleflight.Outcome[T], o *singleflight.Outcome[T]) bool {
	deadline, _ := cctx.Deadline()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case *o = <-done:
		return true
	case <-t.C:
		return false
	}
}

// computeDegraded computes keys without the store's claims (Redis is
// unreachable), bounded by MaxDegradedComputes; nothing is stored. floor
// is keptFloor before the compute began: its values' stamp (see
// degradedFor).
func (c *Cache[V]) computeDegraded(ctx context.Context, keys []string, fn batchFunc[V]) (r computed[V], floor uint64, err error) {
	if c.sem != nil {
		if err := c.sem.Acquire(ctx, 1); err != nil {
			return computed[V]{}, 0, err
		}
		defer c.sem.Release(1)
	}
	floor = c.keptFloor.Load()
	return c.compute(ctx, keys, fn), floor, nil
}

// degradedFor is computedFor for key's degraded compute r, begun at floor:
// its value (or "not found") is kept-stamped with floor, so that an
// invalidation in this process since then refuses it (see entry.kept).
func (c *Cache[V]) degradedFor(ctx context.Context, key string, r computed[V], prev *entry[V], floor uint64) (loaded[V], error) {
	l, err := c.computedFor(ctx, key, r, prev, Degraded)
	if l.outcome == Degraded {
		l.stamp, l.kept = marks.Stamp{Gen: floor}, true
	}
	return l, err
}

// keptEntry returns key's value computed while Redis was unreachable, if
// one is still kept: fresh (answer it), or inside its StaleIfError window
// (it may answer for a failing compute).
func (c *Cache[V]) keptEntry(key string, now time.Time) (e entry[V], fresh, ok bool) {
	if c.kept == nil {
		return e, false, false
	}
	if e, ok = c.kept.Get(key, now.UnixNano()); !ok || e.stamp.Gen < c.keptFloor.Load() {
		return e, false, false
	}
	return e, now.Before(e.w.FreshUntil), true
}

// keep records how a degraded compute of key, started when keptFloor was
// floor, ended: a value is kept fresh
// for DegradedTTL and then usable on error for StaleIfError; a failure that
// a kept (or read) value answered re-arms that value for FailSafeThrottle,
// as the store does when Redis is up, so a failing origin is not called on
// every request of an outage. What an invalidation in this process (which
// raises keptFloor) may have made stale is never kept; nor is a value too
// heavy for MaxLocalBytes (see localCost).
func (c *Cache[V]) keep(key string, l loaded[V], err error, prev *entry[V], now time.Time, floor uint64) {
	switch {
	case c.kept == nil || err != nil:
	case l.outcome == Degraded:
		w := stale.Windows{Created: now, FreshUntil: now.Add(c.opts.DegradedTTL)}
		w.StaleUntil = w.FreshUntil
		w.ErrorUntil = w.FreshUntil.Add(c.policy.StaleIfError)
		e := entry[V]{value: l.value, w: w, stamp: marks.Stamp{Gen: floor}, kept: true}
		c.kept.PutWeighted(key, e, localCost(key, &e), w.ErrorUntil.UnixNano())
	case l.outcome == Stale && prev != nil && c.opts.FailSafeThrottle > 0:
		e := *prev
		e.w, e.failSafe = e.w.Rearm(now, c.opts.FailSafeThrottle), true
		e.stamp, e.kept = marks.Stamp{Gen: floor}, true
		c.kept.PutWeighted(key, e, localCost(key, &e), e.w.ErrorUntil.UnixNano())
	}
}

type previousKey struct{}

// revalidatable reports whether e may be handed to a compute as its
// previous value: the marks say it was not hard-invalidated, and said so
// in time (a soft invalidation known already is reported even when the
// other marks cannot be read, and may hide a hard one).
func (c *Cache[V]) revalidatable(ctx context.Context, e entry[V]) bool {
	inv, err := c.invalidationAt(ctx, &e, time.Time{}, false)
	return err == nil && (inv == marks.Valid || inv == marks.Soft)
}

// withPrevious gives the compute of tasks their previous values, for
// [Previous]: only those the invalidation marks vouch for now (valid, or
// expired by ExpireTags). An ErrUnchanged re-arms the previous value under
// the compute's newer claim, so one hard-invalidated before the claim, or
// that nobody can vouch for (the marks unreadable in time), would come
// back valid for the fleet; it may still stand in for a failure
// (mayStandIn), as an expired value does.
func (c *Cache[V]) withPrevious(ctx context.Context, tasks []*task[V]) context.Context {
	var prev map[string]V
	for _, t := range tasks {
		if t.prev != nil && !t.prev.negative && c.revalidatable(ctx, *t.prev) {
			if prev == nil {
				prev = make(map[string]V, len(tasks))
			}
			prev[t.k.Key] = t.prev.value
		}
	}
	if prev == nil {
		return ctx
	}
	return context.WithValue(ctx, previousKey{}, prev)
}

// Previous returns the value key held before the compute running under ctx
// — fresh, stale or expired, while its Stale or StaleIfError window keeps
// it — so that
// the compute function can revalidate it with its origin (an ETag, a
// version number) and return [ErrUnchanged] instead of rebuilding it. Call
// it from within the compute function with the context it was given (with
// a [Cache.GetOrComputeMany] function, for any of the keys it was given);
// ok is false when there is no previous value, or for any other context.
func Previous[V any](ctx context.Context, key string) (v V, ok bool) {
	if ctx == nil {
		return v, false
	}
	prev, _ := ctx.Value(previousKey{}).(map[string]V)
	v, ok = prev[key]
	return v, ok
}

// computeMeta carries what a compute function says about its own result.
type computeMeta struct {
	mu           sync.Mutex
	ttl          time.Duration // 0: the policy's
	stale        time.Duration // < 0: the policy's
	staleIfError time.Duration // < 0: the policy's
	tags         []string
}

// tagList returns the tags fn attached.
func (m *computeMeta) tagList() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tags
}

func newComputeMeta() *computeMeta { return &computeMeta{stale: -1, staleIfError: -1} }

// policy returns p with the compute function's overrides applied.
func (m *computeMeta) policy(p stale.Policy) stale.Policy {
	m.mu.Lock()
	defer m.mu.Unlock()
	return p.With(m.ttl, m.stale, m.staleIfError)
}

type metaKey struct{}

var computeMetaKey = &metaKey{}

func metaFrom(ctx context.Context) *computeMeta {
	if ctx == nil {
		return nil
	}
	m, _ := ctx.Value(computeMetaKey).(*computeMeta)
	return m
}

// SetTTL sets the TTL of the value being computed, overriding Options.TTL
// for this entry (an upstream's max-age, say); inside a
// [Cache.GetOrComputeMany] compute function it applies to every key of that
// call. Call it from within the compute function with the context it was
// given; it reports false, and does nothing, for any other context or a TTL
// under 1ms.
func SetTTL(ctx context.Context, ttl time.Duration) bool {
	m := metaFrom(ctx)
	if m == nil || ttl < time.Millisecond {
		return false
	}
	m.mu.Lock()
	m.ttl = ttl
	m.mu.Unlock()
	return true
}

// SetStale sets the stale-while-revalidate and stale-if-error windows of the
// value being computed, overriding Options.Stale and Options.StaleIfError
// for this entry (an upstream's Cache-Control directives, say). A negative
// duration keeps the option's. Like [SetTTL] it works only inside the
// compute function and reports whether it did.
func SetStale(ctx context.Context, staleFor, staleIfError time.Duration) bool {
	m := metaFrom(ctx)
	if m == nil {
		return false
	}
	m.mu.Lock()
	if staleFor >= 0 {
		m.stale = staleFor
	}
	if staleIfError >= 0 {
		m.staleIfError = staleIfError
	}
	m.mu.Unlock()
	return true
}
