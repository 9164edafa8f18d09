package redisstep

import (
	"context"
	"sync/atomic"
	"time"
)

// Breaker is a consecutive-failure circuit breaker: Threshold failures in a
// row open it for Cooldown; then one background probe (never a caller's
// request, so no caller can leave it half-open) tries Redis, and its success
// closes it while its failure opens it for another cooldown. The call that
// starts the probe may wait for its verdict (AllowWait), so that the first
// call after an outage healed uses Redis. Safe for concurrent use; the zero
// value is closed.
type Breaker struct {
	// Threshold is how many failures in a row open the breaker.
	Threshold int32
	// Cooldown is how long the breaker stays open before its probe.
	Cooldown time.Duration
	// Probe starts the background probe, which must end in Success or
	// ProbeFailed; it is set once, before use.
	Probe func()

	failures  atomic.Int32
	openUntil atomic.Int64 // unix nanoseconds; 0 when closed
	probing   atomic.Bool
	// lastSilence is when the last silence counted (unix nanoseconds).
	lastSilence atomic.Int64
	// probeDone is closed when the probe in flight ends (Success or
	// ProbeFailed); nil when none is.
	probeDone atomic.Pointer[chan struct{}]
}

// Allow reports whether a call may use Redis now. Past the cooldown of an
// open breaker it starts the probe and answers false until the probe
// succeeded.
func (b *Breaker) Allow() bool {
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	if time.Now().UnixNano() >= until && b.probing.CompareAndSwap(false, true) {
		b.startProbe()
	}
	return false
}

// AllowWait is Allow, except that the call that finds the cooldown over
// and starts the probe waits for its verdict, up to wait and ctx, and uses
// Redis if the probe closed the breaker: the first call after an outage
// healed is not answered without Redis. Calls that find a probe in flight
// do not wait for it. While Redis stays down, that first call of each
// cooldown pays at most wait (nothing more than a refused dial when Redis
// refuses connections).
func (b *Breaker) AllowWait(ctx context.Context, wait time.Duration) bool {
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	if time.Now().UnixNano() < until || !b.probing.CompareAndSwap(false, true) {
		return false
	}
	done := b.startProbe()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
	return b.openUntil.Load() == 0
}

// startProbe starts the probe; the channel it returns is closed when the
// probe ends.
func (b *Breaker) startProbe() <-chan struct{} {
	done := make(chan struct{})
	b.probeDone.Store(&done)
	b.Probe()
	return done
}

// probeEnded closes the channel of the probe in flight, if any.
func (b *Breaker) probeEnded() {
	if p := b.probeDone.Swap(nil); p != nil {
		close(*p)
	}
}

// Success records a Redis success; closed reports whether it closed an open
// breaker.
func (b *Breaker) Success() (closed bool) {
	if b.failures.Load() != 0 || b.openUntil.Load() != 0 {
		b.failures.Store(0)
		closed = b.openUntil.Swap(0) != 0
		b.probing.Store(false)
		b.probeEnded()
	}
	return closed
}

// Failure records a Redis failure; opened reports whether it opened a closed
// breaker. An open breaker's cooldown starts again.
func (b *Breaker) Failure() (opened bool) {
	if b.failures.Add(1) >= b.Threshold {
		opened = b.openUntil.Swap(time.Now().Add(b.Cooldown).UnixNano()) == 0
		b.probing.Store(false)
	}
	return opened
}

// Silence records a step that found Redis silent for its whole budget
// (see redisHealth). Silences less than spacing apart are one observation
// of the same silence, counted once: the steps a burst of callers started
// together (a fleet's cold start, every connection dialled at once) end
// together, and must not open the breaker by their number alone. A Redis
// silent for good still opens it, after threshold spacings.
func (b *Breaker) Silence(spacing time.Duration) (opened bool) {
	now := time.Now().UnixNano()
	last := b.lastSilence.Load()
	if now-last < int64(spacing) || !b.lastSilence.CompareAndSwap(last, now) {
		return false
	}
	return b.Failure()
}

// ProbeFailed records a failed probe: the breaker stays open for another
// cooldown, and the next call after it probes again.
func (b *Breaker) ProbeFailed() {
	if until := b.openUntil.Load(); until != 0 {
		b.openUntil.CompareAndSwap(until, time.Now().Add(b.Cooldown).UnixNano())
	}
	b.probing.Store(false)
	b.probeEnded()
}

// Open reports whether the breaker is open (Redis considered down).
func (b *Breaker) Open() bool { return b.openUntil.Load() != 0 }
