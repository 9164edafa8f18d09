package cache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/redisstep"
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
	_, err := redisstep.Run(ctx, c.redis.budget, func(ctx context.Context) (string, error) {
		return c.redis.rdb.Ping(ctx).Result()
	})
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && !errors.Is(err, ErrRedisTimeout) {
		return fmt.Errorf("cache: ping Redis at %s: %w", c.redis.addrs(), ctx.Err())
	}
	if errors.Is(err, ErrRedisTimeout) {
		// go-redis retries a failed dial until the deadline and reports
		// only the deadline: one dial of our own names the cause.
		if derr := c.redis.dialCause(ctx); derr != nil {
			err = fmt.Errorf("%w (%w)", err, derr)
		}
	}
	return fmt.Errorf("%w: namespace %q: ping Redis at %s: %w", ErrUnavailable, c.opts.Namespace, c.redis.addrs(), err)
}

// dialCause dials the client's (first) address once, within the budget,
// and returns the dial's error: why a PING that timed out could not
// connect (nil when it can connect, or for a client whose address is not
// known).
func (s *redisStore[V]) dialCause(ctx context.Context) error {
	network, addr := "tcp", ""
	switch r := s.rdb.(type) {
	case *redis.Client:
		network, addr = r.Options().Network, r.Options().Addr
	case *redis.ClusterClient:
		if a := r.Options().Addrs; len(a) > 0 {
			addr = a[0]
		}
	}
	if addr == "" || addr == "FailoverClient" || (network != "tcp" && network != "unix") {
		return nil
	}
	d := s.budget.Timeout()
	if d <= 0 {
		d = probeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	return nil
}

// addrs names the Redis server(s) the client is configured with, for
// error messages and log lines.
func (s *redisStore[V]) addrs() string {
	switch r := s.rdb.(type) {
	case *redis.Client:
		return r.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(r.Options().Addrs, ",")
	case *redis.Ring:
		var a []string
		for _, addr := range r.Options().Addrs {
			a = append(a, addr)
		}
		slices.Sort(a)
		return strings.Join(a, ",")
	}
	return fmt.Sprintf("(%T)", s.rdb)
}
