package cache_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

// Get never answers "not found" for a value it could not vouch for: when
// the invalidation marks cannot be read within InvalidationWait (Redis is
// slower than that), the value may still be valid, so Get returns an error
// matching ErrUnavailable instead, and finds the value again once Redis
// answers in time. (A compute path treats such an entry as expired and
// computes; Get computes nothing.)
func TestGetWithMarksUnreadableIsUnavailableNotNotFound(t *testing.T) {
	for _, cfg := range clientConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			p := newProxy(t)
			rdb := redis.NewClient(cfg.opts(p.Addr()))
			t.Cleanup(func() { _ = rdb.Close() })
			// The budget is far above the round trip: the value's own read
			// succeeds, only the marks' trust (100 ms) is outlasted.
			c := newCache[string](t, rdb, cache.Options{RedisTimeout: 2 * time.Second, InvalidationWait: 100 * time.Millisecond})
			if err := c.Set(t.Context(), "k", "v", cache.WithTags("t")); err != nil {
				t.Fatal(err)
			}
			p.SetLatency(80 * time.Millisecond) // a 160 ms round trip: no mark read answers within 100 ms
			v, found, err := c.Get(t.Context(), "k")
			if found || !errors.Is(err, cache.ErrUnavailable) {
				t.Fatalf("Get with the marks unreadable: %q, found=%v, %v; want an error matching ErrUnavailable", v, found, err)
			}
			p.SetLatency(0)
			if v, found, err := c.Get(t.Context(), "k"); err != nil || !found || v != "v" {
				t.Fatalf("Get once Redis answers in time: %q, found=%v, %v", v, found, err)
			}
		})
	}
}
