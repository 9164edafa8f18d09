package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// GetOrCompute returns the value for key, computing it with fn when it is
// missing or expired: once for all concurrent callers in the process and,
// through the Redis lease, once for the whole fleet. fn's error is returned
// and never cached, except an error wrapping [ErrNotFound], which is cached
// for NegativeTTL. When fn fails and a value inside its StaleIfError window
// exists, that value is returned without error (use [Cache.Fetch] to see the
// error). A value that cannot be stored (over MaxValueBytes) is returned
// without error too; Stats().Unstored counts it.
func (c *Cache[V]) GetOrCompute(ctx context.Context, key string, fn func(context.Context) (V, error)) (V, error) {
	r, err := c.Fetch(ctx, key, fn)
	return r.Value, err
}

// Fetch is [Cache.GetOrCompute] and also says how the call was answered.
// Result.Err says why a value answered without being fresh from fn (the
// origin's error a stale value stood in for), or why a computed value was
// not stored (it matches [ErrValueTooLarge], say).
func (c *Cache[V]) Fetch(ctx context.Context, key string, fn func(context.Context) (V, error)) (Result[V], error) {
	return c.fetch(ctx, key, fn, nil)
}

// FetchWithFallback is [Cache.Fetch], except that when another replica keeps
// computing key past WaitTimeout, fallback answers (Outcome [Fallback]);
// its result is not stored. When callers in one process share a call, the
// fallback of the caller that started it is used.
func (c *Cache[V]) FetchWithFallback(ctx context.Context, key string, fn, fallback func(context.Context) (V, error)) (Result[V], error) {
	if fallback == nil {
		return Result[V]{}, fmt.Errorf("%w: fallback", ErrNilFunc)
	}
	return c.fetch(ctx, key, fn, fallback)
}

// Get returns the value for key when it is fresh or within its stale window.
// found is false when there is none, when a "not found" is cached, or when
// the entry is corrupt. While Redis is known to be down (the breaker is
// open) it returns an error matching [ErrUnavailable] at once.
func (c *Cache[V]) Get(ctx context.Context, key string) (v V, found bool, err error) {
	if err := c.check(key); err != nil {
		return v, false, err
	}
	var version uint64
	if c.l1 != nil {
		if e, ok := c.l1.get(key, c.now()); ok && !e.negative {
			c.stats.l1Hits.add()
			return e.value, true, nil
		}
		version = c.l1.version()
	}
	if !c.store.available() {
		return v, false, fmt.Errorf("cache: get %q: %w", key, ErrUnavailable)
	}
	e, found, err := c.store.read(ctx, c.keysFor(key), readShared)
	if err != nil || !found || e.negative {
		return v, false, err
	}
	switch c.judge(e, true, c.now()) {
	case verdictHit, verdictEarly:
		c.l1put(key, e, version)
		return e.value, true, nil
	case verdictStale, verdictFailSafe:
		return e.value, true, nil
	}
	return v, false, nil
}

// Set stores v for key, fresh for TTL. A compute in flight for key cannot
// overwrite it: its fill is fenced out. After Set returns, this replica
// serves v (or a newer value); other replicas' L1 tiers drop the old value
// when the invalidation reaches them.
func (c *Cache[V]) Set(ctx context.Context, key string, v V) error {
	if err := c.check(key); err != nil {
		return err
	}
	if !c.store.available() {
		return fmt.Errorf("cache: set %q: %w", key, ErrUnavailable)
	}
	e := entry[V]{value: v, w: c.policy.Write(c.now(), 0, rand.Float64())}
	version := c.l1version() // before the write: no read before it can see v
	err := c.store.set(ctx, c.keysFor(key), e)
	c.forgetLocal(key)
	// v goes into L1 at a version from before the write, so that a newer
	// write announced meanwhile keeps it out; refused, the key is dropped.
	if c.l1 != nil && (err != nil || !c.l1put(key, e, version)) {
		c.l1.invalidate(key)
	}
	return err
}

// forgetLocal drops what this process holds of key besides L1 once a
// write returned: a load in flight may have read the old value (later calls
// start their own), and a value kept during an outage is older than the
// write.
func (c *Cache[V]) forgetLocal(key string) {
	c.sf.Forget(key)
	if c.kept != nil {
		c.kept.delete(key)
	}
}

// Delete removes key. A compute in flight for key cannot write its result
// afterwards: its fill is fenced out. After Delete returns, this replica
// never serves the deleted value; other replicas' L1 tiers drop it when the
// invalidation reaches them.
func (c *Cache[V]) Delete(ctx context.Context, key string) error {
	if err := c.check(key); err != nil {
		return err
	}
	if !c.store.available() {
		return fmt.Errorf("cache: delete %q: %w", key, ErrUnavailable)
	}
	err := c.store.delete(ctx, c.keysFor(key))
	c.forgetLocal(key)
	if c.l1 != nil {
		c.l1.invalidate(key)
	}
	return err
}
