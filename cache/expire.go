package cache

import (
	"context"
	"time"
	"unsafe"

	"github.com/stampede-go/stampede/cache/internal/envelope"
	"github.com/stampede-go/stampede/stale"
)

// Expire is the single-key [Cache.ExpireTags]: key's value becomes expired
// instead of missing. The next call recomputes it, and the value may still
// answer for a failing (or, with SoftTimeout, slow) compute while inside
// its stale-if-error window past its TTL (max(Stale, StaleIfError); with
// neither, Expire deletes it, like [Cache.Delete]): FusionCache's Expire. A
// cached "not found" is deleted. Like Delete, a compute in flight for key
// cannot write its result afterwards, and after Expire returns this
// replica never answers the value as a hit (nor Stale, nor from L1); other
// replicas' L1 tiers drop it when the invalidation reaches them, and
// replicas read it as expired by their own clocks (skew between replicas'
// clocks can leave it fresh for that long). When Redis fails it (or the
// breaker is open), the error matches [ErrUnavailable] and the key may or
// may not be expired; when ctx ends first, ctx's error.
func (c *Cache[V]) Expire(ctx context.Context, key string) error {
	return c.retire(ctx, "expire", key, func(k keys) error {
		if c.redis == nil {
			c.local.expire(k)
			return nil
		}
		return c.redis.expire(ctx, k)
	})
}

// expireWindows returns w ended at now, keeping only its stale-if-error
// window; ok is false when nothing could stand in afterwards (no window
// past the TTL and not a fail-safe value, already past it, or created
// after now by this clock), and the entry is to be deleted.
func expireWindows(w stale.Windows, failSafe bool, now time.Time) (_ stale.Windows, ok bool) {
	if !(failSafe || w.ErrorUntil.After(w.FreshUntil)) || !now.Before(w.ErrorUntil) || w.Created.After(now) {
		return w, false
	}
	w.FreshUntil = minTime(w.FreshUntil, now)
	w.StaleUntil = minTime(w.StaleUntil, now)
	return w, true
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// expire is Expire on Redis (redisstore.Store.Expire): read the envelope,
// end its windows (expiredEnvelope), and write it back only if unchanged; a
// key that keeps changing is deleted.
func (s *redisStore[V]) expire(ctx context.Context, k keys) error {
	return s.p.Expire(ctx, k, s.expiredEnvelope)
}

// expiredEnvelope returns the envelope cur with its windows ended now, or
// "" when it is to be deleted (nothing to stand in, a cached "not found",
// corrupt or foreign, or none).
func (s *redisStore[V]) expiredEnvelope(cur string) string {
	if cur == "" {
		return ""
	}
	h, value, err := envelope.Decode(unsafe.Slice(unsafe.StringData(cur), len(cur)))
	if err != nil || h.Type != s.c.typeTag || h.Flags&envelope.FlagNegative != 0 {
		return ""
	}
	w := stale.Windows{Created: fromMillis(h.Created), FreshUntil: fromMillis(h.FreshUntil),
		StaleUntil: fromMillis(h.StaleUntil), ErrorUntil: fromMillis(h.ErrorUntil)}
	// Whole milliseconds, rounded down: every later reading of this clock
	// finds the entry expired.
	now := s.c.now().Truncate(time.Millisecond)
	w, ok := expireWindows(w, h.Flags&envelope.FlagFailSafe != 0, now)
	if !ok {
		return ""
	}
	h.FreshUntil, h.StaleUntil = toMillis(w.FreshUntil), toMillis(w.StaleUntil)
	b, err := envelope.Encode(&h, value)
	if err != nil {
		return ""
	}
	return string(b)
}
