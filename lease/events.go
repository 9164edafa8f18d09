package lease

import (
	"context"
	"time"
)

// EventKind says what an [Event] reports.
type EventKind uint8

// The events a [Client] or a [Quorum] reports to its [Observer].
const (
	// EventAcquired: a lease was taken. Duration is the time Acquire took,
	// retries included; Fence is the lease's fence.
	EventAcquired EventKind = iota + 1
	// EventBusy: an attempt found the lease held by another owner (one per
	// attempt, so retries under contention count each time).
	EventBusy
	// EventExtended: KeepAlive (or Using) tried to extend the lease. Err is
	// nil when it was extended.
	EventExtended
	// EventLost: a held lease was lost (an extension found it gone, or its
	// validity deadline passed with no extension, or after the last
	// allowed one); Err is the cause.
	EventLost
	// EventReleased: the holder released the lease. Remaining is how much of
	// its validity was left: how close the work came to losing it.
	EventReleased
	// EventReleaseRejected: a release found the lease no longer ours.
	EventReleaseRejected
	// EventWork: Using's function returned. Duration is how long it ran, Err
	// its error.
	EventWork
	// EventRedisError: a call to a Redis server failed; Err says why.
	EventRedisError
)

var kindNames = [...]string{"", "acquired", "busy", "extended", "lost", "released", "release_rejected", "work", "redis_error"}

// String returns the kind's name, e.g. "acquired".
func (k EventKind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one thing that happened to a lease. Name is the lease name: an
// observer that exports metrics must not use it as a label.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Name is the lease name.
	Name string
	// Duration is the time to acquire (EventAcquired) or the work's
	// duration (EventWork).
	Duration time.Duration
	// Remaining is the validity left at release (EventReleased), or the
	// holder's remaining TTL as last seen (EventBusy).
	Remaining time.Duration
	// Fence is the lease's fence, where there is a lease.
	Fence int64
	// Err is the error, for the kinds that carry one.
	Err error
}

// Observer receives lease events. It is called synchronously on the
// goroutine that caused the event, so it must be fast and safe for
// concurrent use. A nil Observer costs nothing.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(ctx context.Context, e Event)

// Observe implements [Observer].
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

func (o *Options) observe(ctx context.Context, e Event) {
	if o.Observer != nil {
		o.Observer.Observe(ctx, e)
	}
}
