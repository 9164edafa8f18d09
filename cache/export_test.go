package cache

import (
	"sync"
	"time"

	"github.com/stampede-go/stampede/cache/internal/redisstep"
)

// Clock is a clock that tests move by hand, so that they walk a timeline
// instead of sleeping through TTLs.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock standing at the current time.
func NewClock() *Clock { return &Clock{t: time.Now()} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// UseClock makes c read time from clk. Call it before c is used.
func UseClock[V any](c *Cache[V], clk *Clock) { c.clock, c.realClock = clk.Now, false }

// RedisBudget is the budget a Redis step of c starting now gets: it
// follows the round trip c has seen (0 for a process-local cache).
func RedisBudget[V any](c *Cache[V]) time.Duration {
	if c.redis == nil {
		return 0
	}
	return c.redis.p.Budget().Step()
}

// L1Size is how many entries c's L1 holds at most (0: L1 is off).
func L1Size[V any](c *Cache[V]) int {
	if c.l1 == nil {
		return 0
	}
	return c.l1.size
}

// Refreshing reports whether background work (a refresh) for key is in
// flight on c: a stale read meanwhile starts none of its own.
func Refreshing[V any](c *Cache[V], key string) bool {
	_, ok := c.refreshing.Load(key)
	return ok
}

// Heartbeating reports whether c's invalidation subscription's heartbeat
// is running (decisions wanted it lately).
func Heartbeating[V any](c *Cache[V]) bool {
	return c.redis != nil && c.redis.p.Notifier().Beating()
}

// UnderLoad reports whether err, a Redis failure a cache counted, is one
// under load (Redis answering, slowly), which never opens the breaker nor
// makes a caller compute locally; not an outage.
func UnderLoad(err error) bool { return redisstep.UnderLoad(err) }

// L1Tracked reports whether c's L1 tracks key with its channel's
// subscription confirmed, after asking it to: L1 takes a put of key only
// then. Tests poll it before the read they want to go into L1.
func L1Tracked[V any](c *Cache[V], key string) bool {
	c.tracks.knock(key)
	c.l1wanted(key)
	return c.synced.Load() && c.l1open(key)
}

// L1Trackers is how many keys c's L1 tracks.
func L1Trackers[V any](c *Cache[V]) int { return c.l1Tracked() }

// SweepL1Trackers runs the trackers' sweep now.
func SweepL1Trackers[V any](c *Cache[V]) { c.sweepTracks() }
