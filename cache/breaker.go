package cache

import (
	"sync/atomic"
	"time"
)

// breaker is a consecutive-failure circuit breaker: threshold failures in a
// row open it for cooldown; then one background probe (never a caller's
// request, so no caller can leave it half-open) tries Redis, and its success
// closes it while its failure opens it for another cooldown. Safe for
// concurrent use; the zero value is closed.
type breaker struct {
	threshold int32
	cooldown  time.Duration
	// probe starts the background probe, which must end in success or
	// failure; it is set once, before use.
	probe func()

	failures  atomic.Int32
	openUntil atomic.Int64 // unix nanoseconds; 0 when closed
	probing   atomic.Bool
	// lastSilence is when the last silence counted (unix nanoseconds).
	lastSilence atomic.Int64
}

// allow reports whether a call may use Redis now. Past the cooldown of an
// open breaker it starts the probe and answers false until the probe
// succeeded.
func (b *breaker) allow() bool {
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	if time.Now().UnixNano() >= until && b.probing.CompareAndSwap(false, true) {
		b.probe()
	}
	return false
}

// success records a Redis success; closed reports whether it closed an open
// breaker.
func (b *breaker) success() (closed bool) {
	if b.failures.Load() != 0 || b.openUntil.Load() != 0 {
		b.failures.Store(0)
		closed = b.openUntil.Swap(0) != 0
		b.probing.Store(false)
	}
	return closed
}

// failure records a Redis failure; opened reports whether it opened a closed
// breaker. An open breaker's cooldown starts again.
func (b *breaker) failure() (opened bool) {
	if b.failures.Add(1) >= b.threshold {
		opened = b.openUntil.Swap(time.Now().Add(b.cooldown).UnixNano()) == 0
		b.probing.Store(false)
	}
	return opened
}

// silence records a step that found Redis silent for its whole budget
// (see redisHealth). Silences less than spacing apart are one observation
// of the same silence, counted once: the steps a burst of callers started
// together (a fleet's cold start, every connection dialled at once) end
// together, and must not open the breaker by their number alone. A Redis
// silent for good still opens it, after threshold spacings.
func (b *breaker) silence(spacing time.Duration) (opened bool) {
	now := time.Now().UnixNano()
	last := b.lastSilence.Load()
	if now-last < int64(spacing) || !b.lastSilence.CompareAndSwap(last, now) {
		return false
	}
	return b.failure()
}

// probeFailed records a failed probe: the breaker stays open for another
// cooldown, and the next call after it probes again.
func (b *breaker) probeFailed() {
	if until := b.openUntil.Load(); until != 0 {
		b.openUntil.CompareAndSwap(until, time.Now().Add(b.cooldown).UnixNano())
	}
	b.probing.Store(false)
}

// open reports whether the breaker is open (Redis considered down).
func (b *breaker) open() bool { return b.openUntil.Load() != 0 }
