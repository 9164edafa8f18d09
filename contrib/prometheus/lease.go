package stampedeprom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-go/stampede/lease"
)

// LeaseObserver is a [lease.Observer] and a [prometheus.Collector] for
// leases used on their own (lease.Client, lease.Quorum, lease.Election):
// register it once and give it to any number of lockers. It has no labels
// at all: a lease name, like a cache key, has unbounded cardinality; give
// each kind of job an observer of its own with its own Prefix when they
// must be told apart. It is safe for concurrent use.
//
// The metrics, with the default "stampede" prefix:
//
//	stampede_lock_acquire_seconds             time to acquire a lease, retries included
//	stampede_lock_acquired_total              leases taken
//	stampede_lock_busy_total                  attempts that found the lease held by another owner (contention)
//	stampede_lock_extensions_total{result}    extensions by KeepAlive and Using, result "ok" or "failed"
//	stampede_lock_lost_total                  held leases lost (taken, expired, or extensions exhausted)
//	stampede_lock_work_seconds                how long the functions run under Using took
//	stampede_lock_released_total              leases released while still held
//	stampede_lock_remaining_at_release_seconds how much of the lease's validity was left at release
//	stampede_lock_release_rejected_total      releases that found the lease no longer ours
//	stampede_lock_redis_errors_total          failed calls to a Redis server
type LeaseObserver struct {
	acquireSeconds, workSeconds, remaining                *prometheus.HistogramVec
	acquired, busy, lost, released, rejected, redisErrors *prometheus.CounterVec
	extensions                                            *prometheus.CounterVec
	metrics
}

var (
	_ lease.Observer       = (*LeaseObserver)(nil)
	_ prometheus.Collector = (*LeaseObserver)(nil)
)

// NewLeaseObserver returns a LeaseObserver. Its metric names begin
// "<Prefix>_lock_", apart from the cache's "<Prefix>_lease_" ones, so one
// registry can hold both.
func NewLeaseObserver(opts Options) *LeaseObserver {
	opts.setDefaults()
	o := &LeaseObserver{metrics: metrics{opts: opts}}
	o.acquireSeconds = o.hist("lock_acquire_seconds", "Time to acquire a lease, retries included.")
	o.acquired = o.counter("lock_acquired_total", "Leases taken.")
	o.busy = o.counter("lock_busy_total", "Lease attempts that found it held by another owner.")
	o.extensions = o.counter("lock_extensions_total", "Lease extensions by KeepAlive and Using, by result.", "result")
	o.lost = o.counter("lock_lost_total", "Held leases lost: taken, expired, or their extensions exhausted.")
	o.workSeconds = o.hist("lock_work_seconds", "Duration of the functions run under Using.")
	o.released = o.counter("lock_released_total", "Leases released while still held.")
	o.remaining = o.hist("lock_remaining_at_release_seconds", "Validity left on a lease when it was released: how close the work came to losing it.")
	o.rejected = o.counter("lock_release_rejected_total", "Releases that found the lease no longer ours.")
	o.redisErrors = o.counter("lock_redis_errors_total", "Failed calls to a Redis server.")
	// Every series at 0 from the start: a family with no event yet is
	// exported, not missing.
	for _, v := range []*prometheus.HistogramVec{o.acquireSeconds, o.workSeconds, o.remaining} {
		v.WithLabelValues()
	}
	for _, v := range []*prometheus.CounterVec{o.acquired, o.busy, o.lost, o.released, o.rejected, o.redisErrors} {
		v.WithLabelValues()
	}
	for _, r := range []string{"ok", "failed"} {
		o.extensions.WithLabelValues(r)
	}
	return o
}

// Observe implements [lease.Observer].
func (o *LeaseObserver) Observe(_ context.Context, e lease.Event) {
	switch e.Kind {
	case lease.EventAcquired:
		o.acquired.WithLabelValues().Inc()
		o.acquireSeconds.WithLabelValues().Observe(e.Duration.Seconds())
	case lease.EventBusy:
		o.busy.WithLabelValues().Inc()
	case lease.EventExtended:
		result := "ok"
		if e.Err != nil {
			result = "failed"
		}
		o.extensions.WithLabelValues(result).Inc()
	case lease.EventLost:
		o.lost.WithLabelValues().Inc()
	case lease.EventWork:
		o.workSeconds.WithLabelValues().Observe(e.Duration.Seconds())
	case lease.EventReleased:
		o.released.WithLabelValues().Inc()
		o.remaining.WithLabelValues().Observe(max(e.Remaining, 0).Seconds())
	case lease.EventReleaseRejected:
		o.rejected.WithLabelValues().Inc()
	case lease.EventRedisError:
		o.redisErrors.WithLabelValues().Inc()
	}
}
