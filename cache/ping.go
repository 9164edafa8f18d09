package cache

import (
	"context"
	"errors"
	"fmt"
)

// Ping checks that Redis answers: one PING, within Options.RedisTimeout
// (and ctx). It is the health check for a readiness probe, and the way to
// find a wrong address or a Redis that is down at start-up: [New] does not
// dial. An error names the address(es) and the cause and matches
// [ErrUnavailable] (or is ctx's error when ctx ended first). In
// process-local mode it returns nil. Ping does not move the breaker.
func (c *Cache[V]) Ping(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	if c.closedFlag.Load() {
		return ErrClosed
	}
	if c.redis == nil {
		return nil
	}
	err := c.redis.p.Ping(ctx)
	if err == nil {
		c.warnEvictionRisk(ctx)
		return nil
	}
	if ctx.Err() != nil && !errors.Is(err, ErrRedisTimeout) {
		return fmt.Errorf("cache: ping Redis at %s: %w", c.redis.p.Addrs(), ctx.Err())
	}
	if errors.Is(err, ErrRedisTimeout) {
		// go-redis retries a failed dial until the deadline and reports
		// only the deadline: one dial of our own names the cause.
		if derr := c.redis.p.DialCause(ctx); derr != nil {
			err = fmt.Errorf("%w (%w)", err, derr)
		}
	}
	return fmt.Errorf("%w: namespace %q: ping Redis at %s: %w", ErrUnavailable, c.opts.Namespace, c.redis.p.Addrs(), err)
}

// warnEvictionRisk logs, once per Cache, a warning when Redis' memory
// settings put the cache at risk (see redisstore.Store.EvictionRisk).
func (c *Cache[V]) warnEvictionRisk(ctx context.Context) {
	c.evictionChecked.Do(func() {
		if risk := c.redis.p.EvictionRisk(ctx); risk != "" {
			c.opts.Logger.Warn("cache: Redis eviction policy: "+risk, "namespace", c.opts.Namespace, "addr", c.redis.p.Addrs())
		}
	})
}
