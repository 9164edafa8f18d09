package cache

import (
	"sync/atomic"
	"time"
)

// breaker is a consecutive-failure circuit breaker: threshold failures in a
// row open it for cooldown; then one call at a time probes, and a success
// closes it. Safe for concurrent use; the zero value is closed.
type breaker struct {
	threshold int32
	cooldown  time.Duration

	failures  atomic.Int32
	openUntil atomic.Int64 // unix nanoseconds; 0 when closed
	probing   atomic.Bool
}

// allow reports whether a call may use Redis now.
func (b *breaker) allow() bool {
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	if time.Now().UnixNano() < until {
		return false
	}
	return b.probing.CompareAndSwap(false, true) // half-open: one probe at a time
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
// breaker.
func (b *breaker) failure() (opened bool) {
	if b.failures.Add(1) >= b.threshold {
		opened = b.openUntil.Swap(time.Now().Add(b.cooldown).UnixNano()) == 0
		b.probing.Store(false)
	}
	return opened
}

// open reports whether the breaker is open (Redis considered down).
func (b *breaker) open() bool { return b.openUntil.Load() != 0 }
