package cache

import (
	"context"
	"log/slog"
	"time"
)

// EventKind says what an [Event] reports.
type EventKind uint8

// The events a Cache reports to its [Observer].
const (
	// EventOutcome: one caller's call was answered; Outcome says how, and
	// Negative marks a cached "not found".
	EventOutcome EventKind = iota + 1
	// EventLeaseAcquired: this process took a key's lease; Duration is the
	// time the acquisition took.
	EventLeaseAcquired
	// EventLeaseBusy: another replica held the lease.
	EventLeaseBusy
	// EventLeaseExtended: the lease was extended while computing.
	EventLeaseExtended
	// EventLeaseLost: an extension found the lease taken or gone.
	EventLeaseLost
	// EventReleaseRejected: releasing found the lease in another holder's
	// hands (a fill, or an abandon finding it gone or another's).
	EventReleaseRejected
	// EventCompute: the compute function ran; Duration is how long, Err its
	// error (nil on success, a wrapped ErrNotFound for a "not found").
	EventCompute
	// EventWait: this process waited for another replica's compute;
	// Duration is how long, Outcome how the wait ended (Waited when
	// another replica's value arrived: one recompute saved).
	EventWait
	// EventFencedOut: a fill was rejected because its writer no longer held
	// its lease: it expired or was lost in a failover, or a newer lease, Set
	// or Delete took it while computing.
	EventFencedOut
	// EventCorrupt: an entry under a key of ours was not ours or did not
	// decode; it was treated as a miss.
	EventCorrupt
	// EventRedisError: a Redis call failed; Err says why.
	EventRedisError
	// EventBreakerOpen: Redis is considered down; calls compute locally.
	EventBreakerOpen
	// EventBreakerClosed: Redis answers again.
	EventBreakerClosed
	// EventUnstored: a computed value could not be stored (Err says why:
	// too large, or the codec failed); it answered its callers.
	EventUnstored
)

var eventNames = [...]string{"unknown", "outcome", "lease_acquired", "lease_busy", "lease_extended", "lease_lost",
	"release_rejected", "compute", "wait", "fenced_out", "corrupt", "redis_error", "breaker_open", "breaker_closed", "unstored"}

// String returns the event kind's snake_case name, e.g. "lease_lost".
func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return eventNames[0]
}

// Event is one thing that happened in a Cache. Key is the cache key; an
// observer that exports metrics must not use it as a label (its
// cardinality is unbounded).
type Event struct {
	Kind      EventKind
	Namespace string
	Key       string
	Outcome   Outcome
	Negative  bool
	Duration  time.Duration
	Err       error
}

// Observer receives a Cache's events. It is called synchronously on the
// calling goroutine and must be fast and safe for concurrent use. ctx is the
// caller's context (for compute and wait events, the detached context the
// compute ran under, which keeps the first caller's values such as a trace).
//
// A nil Observer costs nothing: no event is built. Adapters for Prometheus
// and OpenTelemetry are in the contrib modules.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(ctx context.Context, e Event)

// Observe implements [Observer].
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// observe reports an event when an observer is configured.
func (c *Cache[V]) observe(ctx context.Context, e Event) {
	if c.opts.Observer == nil {
		return
	}
	e.Namespace = c.opts.Namespace
	c.opts.Observer.Observe(ctx, e)
}

// logRare logs one of the rare events that an operator should see, with
// the namespace, the key (when the event is about one) and the cause (err,
// when there is one), then extra.
func (c *Cache[V]) logRare(ctx context.Context, level slog.Level, msg string, key string, err error, extra ...slog.Attr) {
	attrs := make([]slog.Attr, 0, 3+len(extra))
	attrs = append(attrs, slog.String("namespace", c.opts.Namespace))
	if key != "" {
		attrs = append(attrs, slog.String("key", key))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	attrs = append(attrs, extra...)
	c.opts.Logger.LogAttrs(ctx, level, msg, attrs...)
}

// observeClaim reports a claim attempt on key begun at start.
func (c *Cache[V]) observeClaim(ctx context.Context, key string, cl claimed[V], start time.Time) {
	if c.opts.Observer == nil {
		return
	}
	switch {
	case cl.won:
		c.observe(ctx, Event{Kind: EventLeaseAcquired, Key: key, Duration: time.Since(start)})
	case cl.err == nil:
		c.observe(ctx, Event{Kind: EventLeaseBusy, Key: key})
	}
}
