package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stampede-go/stampede/cache/internal/marks"
)

// GetOrCompute returns the value for key, computing it with fn when it is
// missing or expired: once for all concurrent callers in the process and,
// through the Redis lease, once for the whole fleet. fn's error is returned
// and never cached, except an error wrapping [ErrNotFound], which is cached
// for NegativeTTL. When fn fails and a value inside its StaleIfError window
// exists, that value is returned without error (use [Cache.Fetch] to see the
// error). A value that cannot be stored (over MaxValueBytes, or over
// MaxLocalBytes/16 without Redis) is returned without error too; Stats().Unstored counts it.
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
// open) it returns an error matching [ErrUnavailable] at once; when Redis
// fails the read, one matching ErrUnavailable too (and [ErrRedisTimeout]
// past the budget), or ctx's error when ctx ended. An entry whose
// invalidation marks cannot be read (the read fails, or Redis is silent
// past its bound) may still be valid: Get returns an error matching
// ErrUnavailable for it, not "not found".
func (c *Cache[V]) Get(ctx context.Context, key string) (v V, found bool, err error) {
	if ctx == nil {
		return v, false, ErrNilContext
	}
	if err := c.check(key); err != nil {
		return v, false, err
	}
	var version uint64
	if c.l1 != nil {
		if e, ok := c.l1get(ctx, key, c.now()); ok && !e.negative {
			c.stats.l1Hits.add()
			return e.value, true, nil
		}
		version = c.l1.version()
	}
	if !c.store.availableWait(ctx) {
		return v, false, fmt.Errorf("cache: get %q: %w", key, c.unavailable())
	}
	e, found, err := c.store.read(ctx, hitKeys(key), readShared)
	if err != nil {
		return v, false, fmt.Errorf("cache: get %q: %w", key, storeFailed(ctx, err))
	}
	if !found || e.negative {
		return v, false, nil
	}
	verdict, err := c.judge(ctx, &e, true, c.now())
	switch verdict {
	case verdictHit, verdictEarly:
		c.l1put(key, e, version)
		return e.value, true, nil
	case verdictStale, verdictFailSafe:
		return e.value, true, nil
	}
	if err != nil {
		// The entry may be valid: its invalidation marks could not be
		// read in time. That is not "not found".
		return v, false, fmt.Errorf("cache: get %q: %w", key, storeFailed(ctx, err))
	}
	return v, false, nil
}

// Set stores v for key, fresh for TTL (or what opts say: [WithTTL],
// [WithStale], [WithTags]). A compute in flight for key cannot overwrite
// it: its fill is fenced out. After Set returns, this replica serves v (or
// a newer value); other replicas' L1 tiers drop the old value when the
// invalidation reaches them. Bad options get an error matching
// [ErrInvalidOptions] or [ErrInvalidTag], and nothing is stored. With
// Redis, Set costs two round trips: the namespace's invalidation counter
// is read first (the value's generation, so that [Cache.Clear] and
// [Cache.InvalidateTags] apply to it). When Redis fails it (or the breaker
// is open), the error matches [ErrUnavailable] and v may or may not be
// stored; when ctx ends first, ctx's error.
func (c *Cache[V]) Set(ctx context.Context, key string, v V, opts ...SetOption) error {
	if ctx == nil {
		return ErrNilContext
	}
	if err := c.check(key); err != nil {
		return err
	}
	so := setOptions{ttl: 0, stale: -1}
	for _, o := range opts {
		if o != nil {
			o(&so)
		}
	}
	if err := so.validate(); err != nil {
		return fmt.Errorf("cache: set %q: %w", key, err)
	}
	if !c.store.availableWait(ctx) {
		return fmt.Errorf("cache: set %q: %w", key, c.unavailable())
	}
	gen, err := c.store.readGen(ctx)
	if err != nil {
		return fmt.Errorf("cache: set %q: %w", key, storeFailed(ctx, err))
	}
	e := entry[V]{value: v, w: c.policy.With(so.ttl, so.stale, -1).Write(c.now(), 0, rand.Float64()),
		stamp: marks.Stamp{Gen: gen, Tags: so.tags}}
	version := c.l1version() // before the write: no read before it can see v
	e.size, e.digest, err = c.store.set(ctx, c.keysFor(key), e)
	c.forgetLocal(key)
	// v goes into L1 at a version from before the write, so that a newer
	// write announced meanwhile keeps it out; refused, the key is dropped.
	if c.l1 != nil && (err != nil || !c.l1put(key, e, version)) {
		c.l1.invalidate(key)
	}
	if err != nil {
		return storeFailed(ctx, err)
	}
	return nil
}

// SetOption is an option of one [Cache.Set] call.
type SetOption func(*setOptions)

// setOptions is what a Set call's options say.
type setOptions struct {
	ttl   time.Duration // 0: Options.TTL
	stale time.Duration // < 0: Options.Stale
	tags  []string
	err   error // the first bad option
}

func (o *setOptions) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

func (o *setOptions) validate() error { return o.err }

// WithTTL makes the value fresh for ttl instead of Options.TTL (go-redis/
// cache's Item.TTL). A ttl under 1ms makes Set fail with
// [ErrInvalidOptions].
func WithTTL(ttl time.Duration) SetOption {
	return func(o *setOptions) {
		if ttl < time.Millisecond {
			o.fail(fmt.Errorf("%w: WithTTL must be at least 1ms, got %s", ErrInvalidOptions, ttl))
			return
		}
		o.ttl = ttl
	}
}

// WithStale makes the value's stale window (served stale while refreshed)
// d instead of Options.Stale. A negative d makes Set fail with
// [ErrInvalidOptions].
func WithStale(d time.Duration) SetOption {
	return func(o *setOptions) {
		if d < 0 {
			o.fail(fmt.Errorf("%w: WithStale must not be negative, got %s", ErrInvalidOptions, d))
			return
		}
		o.stale = d
	}
}

// WithTags attaches tags to the value, as [SetTags] does for a computed
// one; tags accumulate over options. A tag that breaks [ErrInvalidTag]'s
// rule makes Set fail.
func WithTags(tags ...string) SetOption {
	return func(o *setOptions) {
		if err := checkTags(tags); err != nil {
			o.fail(err)
			return
		}
		if o.tags = unionTags(o.tags, tags); len(o.tags) > maxTags {
			o.fail(fmt.Errorf("%w: %d tags, limit %d", ErrInvalidTag, len(o.tags), maxTags))
		}
	}
}

// forgetLocal drops what this process holds of key besides L1 once a
// write returned: a load in flight may have read the old value (later calls
// start their own), and a value kept during an outage is older than the
// write.
func (c *Cache[V]) forgetLocal(key string) {
	c.sf.Forget(key)
	if c.kept != nil {
		c.kept.Delete(key)
	}
}

// Delete removes key. A compute in flight for key cannot write its result
// afterwards: its fill is fenced out. After Delete returns, this replica
// never serves the deleted value; other replicas' L1 tiers drop it when the
// invalidation reaches them. When Redis fails it (or the breaker is open),
// the error matches [ErrUnavailable] and the key may or may not be
// deleted; when ctx ends first, ctx's error.
func (c *Cache[V]) Delete(ctx context.Context, key string) error {
	return c.retire(ctx, "delete", key, func(k keys) error { return c.store.delete(ctx, k) })
}

// retire is Delete and Expire: it checks the call, runs write on key's
// names, and forgets what this process holds of key (shared reads, loads,
// L1), whatever write's outcome, since it may have applied.
func (c *Cache[V]) retire(ctx context.Context, verb, key string, write func(keys) error) error {
	if ctx == nil {
		return ErrNilContext
	}
	if err := c.check(key); err != nil {
		return err
	}
	if !c.store.availableWait(ctx) {
		return fmt.Errorf("cache: %s %q: %w", verb, key, c.unavailable())
	}
	err := write(c.keysFor(key))
	c.forgetLocal(key)
	if c.l1 != nil {
		c.l1.invalidate(key)
	}
	if err != nil {
		return storeFailed(ctx, err)
	}
	return nil
}
