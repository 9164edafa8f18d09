package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

// Redis refusing connections while the breaker is still closed (the step
// ends at the first refused dial, though go-redis would retry it):
// InvalidateTags,
// ExpireTags and Clear return an error matching ErrUnavailable (nothing
// was invalidated: call again), never one matching the context errors,
// which say the caller's own ctx ended with the invalidation possibly under
// way. A caller's ctx that does end first still gets its own error.
func TestInvalidateWithRedisRefusingConnectionsIsUnavailable(t *testing.T) {
	for _, ctxTimeout := range []bool{false, true} {
		t.Run(map[bool]string{false: "go-redis defaults", true: "ContextTimeoutEnabled"}[ctxTimeout], func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: ctxTimeout})
			t.Cleanup(func() { _ = rdb.Close() })
			c := newCache[string](t, rdb, cache.Options{RedisTimeout: 50 * time.Millisecond, BreakerThreshold: 1000})
			for name, inv := range map[string]func(context.Context) error{
				"InvalidateTags": func(ctx context.Context) error { return c.InvalidateTags(ctx, "t") },
				"ExpireTags":     func(ctx context.Context) error { return c.ExpireTags(ctx, "t") },
				"Clear":          c.Clear,
			} {
				err := inv(bounded(t, 10*time.Second))
				if !errors.Is(err, cache.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
					t.Errorf("%s with Redis refusing connections: %v; want ErrUnavailable, not a context error", name, err)
				}
				if c.Stats().BreakerOpen {
					t.Fatal("the breaker opened: the test needs it closed")
				}
				// Ended before the call: a refused dial is known at once,
				// within any deadline a caller would give.
				ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
				err = inv(ctx)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, cache.ErrUnavailable) {
					t.Errorf("%s whose ctx ended first: %v; want the ctx's error", name, err)
				}
			}
		})
	}
}
