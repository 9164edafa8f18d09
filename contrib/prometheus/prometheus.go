// Package stampedeprom exports a stampede cache's events as Prometheus
// metrics. Its only label is the cache's namespace (and, where it says so,
// an outcome or state): never the cache key, whose cardinality is unbounded.
//
//	obs := stampedeprom.New(stampedeprom.Options{})
//	prometheus.MustRegister(obs)
//	c, _ := cache.New[Report](rdb, cache.Options{Namespace: "reports", Observer: obs})
//
// The metrics, with the default "stampede" prefix:
//
//	stampede_requests_total{namespace,outcome}       callers answered, by outcome (hit, miss, shared, waited, stale, fallback, degraded, negative)
//	stampede_recomputes_saved_total{namespace}       waits that ended with another replica's value: origin calls the lease saved
//	stampede_lease_acquired_total{namespace}         leases this process took
//	stampede_lease_acquire_seconds{namespace}        time to acquire a lease
//	stampede_lease_busy_total{namespace}             attempts that found another replica holding the lease
//	stampede_lease_extended_total{namespace}         lease extensions while computing
//	stampede_lease_lost_total{namespace}             leases lost while computing
//	stampede_lease_release_rejected_total{namespace} releases that found the lease no longer ours
//	stampede_compute_seconds{namespace}              compute function duration
//	stampede_compute_errors_total{namespace}         compute functions that failed (a "not found" is not a failure)
//	stampede_waits_total{namespace,outcome}          waits for another replica's compute, by how they ended
//	stampede_wait_seconds{namespace,outcome}         how long a process waited for another replica, by how the wait ended
//	stampede_fill_fenced_out_total{namespace}        fills rejected by the fence (a newer lease, Set or Delete won)
//	stampede_corrupt_entries_total{namespace}        entries that were not ours or did not decode
//	stampede_redis_errors_total{namespace}           failed Redis calls
//	stampede_breaker_open{namespace}                 1 while Redis is considered down
//	stampede_breaker_transitions_total{namespace,state} breaker openings and closings
//
// Every family is exported from the start, its series at 0, for each
// namespace named in [Options.Namespaces] (from registration) and for each
// cache given the Observer (from [cache.New], which calls [Observer.Init]):
// a dashboard or an alert on stampede_breaker_open sees 0, not no data.
package stampedeprom

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-go/stampede/cache"
)

// Options configures [New]. The zero value is valid.
type Options struct {
	// Prefix starts every metric name. Default: "stampede".
	Prefix string
	// DurationBuckets are the histograms' buckets in seconds. Default: from
	// 1ms to 30s.
	DurationBuckets []float64
	// Namespaces are the caches' namespaces whose series New creates at 0,
	// so that they are exported from registration on. A cache given the
	// Observer adds its own when it is created (see [Observer.Init]).
	Namespaces []string
}

// Observer is a [cache.Observer] and a [prometheus.Collector]: register it
// once and give it to any number of caches. It is safe for concurrent use.
type Observer struct {
	requests, waits                                       *prometheus.CounterVec
	saved, acquired, busy, extended, lost, rejected       *prometheus.CounterVec
	computeErrors, fencedOut, corrupt, redisErrors, trans *prometheus.CounterVec
	acquireSeconds, computeSeconds, waitSeconds           *prometheus.HistogramVec
	breakerOpen                                           *prometheus.GaugeVec
	metrics
}

var _ cache.Observer = (*Observer)(nil)
var _ prometheus.Collector = (*Observer)(nil)

// setDefaults fills in the defaults of [Options].
func (opts *Options) setDefaults() {
	if opts.Prefix == "" {
		opts.Prefix = "stampede"
	}
	if len(opts.DurationBuckets) == 0 {
		opts.DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	}
}

// metrics builds the metrics of one observer, with the same prefix,
// buckets and first labels, and keeps them for Describe and Collect.
type metrics struct {
	opts       Options
	labels     []string
	collectors []prometheus.Collector
}

func (m *metrics) counter(name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.opts.Prefix + "_" + name, Help: help}, append(append([]string(nil), m.labels...), labels...))
	m.collectors = append(m.collectors, v)
	return v
}

func (m *metrics) hist(name, help string, labels ...string) *prometheus.HistogramVec {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.opts.Prefix + "_" + name, Help: help, Buckets: m.opts.DurationBuckets}, append(append([]string(nil), m.labels...), labels...))
	m.collectors = append(m.collectors, v)
	return v
}

// Describe implements [prometheus.Collector].
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect implements [prometheus.Collector].
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}

// New returns an Observer.
func New(opts Options) *Observer {
	opts.setDefaults()
	o := &Observer{metrics: metrics{opts: opts, labels: []string{"namespace"}}}
	counter, hist := o.counter, o.hist
	o.requests = counter("requests_total", "Callers answered, by outcome.", "outcome")
	o.saved = counter("recomputes_saved_total", "Waits that ended with another replica's value: origin calls the lease saved.")
	o.acquired = counter("lease_acquired_total", "Recompute leases this process took.")
	o.busy = counter("lease_busy_total", "Lease attempts that found another replica holding it.")
	o.extended = counter("lease_extended_total", "Lease extensions while computing.")
	o.lost = counter("lease_lost_total", "Leases lost while computing.")
	o.rejected = counter("lease_release_rejected_total", "Releases that found the lease no longer ours.")
	o.computeErrors = counter("compute_errors_total", "Compute functions that failed.")
	o.fencedOut = counter("fill_fenced_out_total", "Fills rejected by the fence: a newer lease, Set or Delete won.")
	o.corrupt = counter("corrupt_entries_total", "Entries that were not ours or did not decode, treated as misses.")
	o.redisErrors = counter("redis_errors_total", "Failed Redis calls.")
	o.trans = counter("breaker_transitions_total", "Circuit breaker state changes.", "state")
	o.waits = counter("waits_total", "Waits for another replica's compute, by how they ended.", "outcome")
	o.acquireSeconds = hist("lease_acquire_seconds", "Time to acquire a recompute lease.")
	o.computeSeconds = hist("compute_seconds", "Compute function duration.")
	o.waitSeconds = hist("wait_seconds", "Time a process waited for another replica's compute, by how the wait ended.", "outcome")
	o.breakerOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: opts.Prefix + "_breaker_open", Help: "1 while Redis is considered down."}, []string{"namespace"})
	o.collectors = append(o.collectors, o.breakerOpen)
	for _, ns := range opts.Namespaces {
		o.Init(ns)
	}
	return o
}

// requestOutcomes are the outcome labels of stampede_requests_total.
var requestOutcomes = []string{"hit", "miss", "shared", "waited", "stale", "fallback", "degraded", "negative"}

// Init creates namespace's series at 0 (requests by every outcome, waits
// ended "waited", breaker transitions by state, the breaker closed), so
// that every family is exported before any event. [cache.New] calls it
// for the cache's namespace; calling it again changes nothing.
func (o *Observer) Init(namespace string) {
	for _, out := range requestOutcomes {
		o.requests.WithLabelValues(namespace, out)
	}
	for _, v := range []*prometheus.CounterVec{o.saved, o.acquired, o.busy, o.extended, o.lost, o.rejected,
		o.computeErrors, o.fencedOut, o.corrupt, o.redisErrors} {
		v.WithLabelValues(namespace)
	}
	o.waits.WithLabelValues(namespace, "waited")
	o.waitSeconds.WithLabelValues(namespace, "waited")
	o.acquireSeconds.WithLabelValues(namespace)
	o.computeSeconds.WithLabelValues(namespace)
	for _, st := range []string{"open", "closed"} {
		o.trans.WithLabelValues(namespace, st)
	}
	o.breakerOpen.WithLabelValues(namespace) // 0 until the breaker opens
}

// Observe implements [cache.Observer].
func (o *Observer) Observe(_ context.Context, e cache.Event) {
	ns := e.Namespace
	switch e.Kind {
	case cache.EventOutcome:
		label := e.Outcome.String()
		if e.Negative {
			label = "negative"
		}
		o.requests.WithLabelValues(ns, label).Inc()
	case cache.EventLeaseAcquired:
		o.acquired.WithLabelValues(ns).Inc()
		o.acquireSeconds.WithLabelValues(ns).Observe(e.Duration.Seconds())
	case cache.EventLeaseBusy:
		o.busy.WithLabelValues(ns).Inc()
	case cache.EventLeaseExtended:
		o.extended.WithLabelValues(ns).Inc()
	case cache.EventLeaseLost:
		o.lost.WithLabelValues(ns).Inc()
	case cache.EventReleaseRejected:
		o.rejected.WithLabelValues(ns).Inc()
	case cache.EventCompute:
		o.computeSeconds.WithLabelValues(ns).Observe(e.Duration.Seconds())
		if e.Err != nil && !errors.Is(e.Err, cache.ErrNotFound) && !errors.Is(e.Err, cache.ErrUncacheable) {
			o.computeErrors.WithLabelValues(ns).Inc()
		}
	case cache.EventWait:
		label := e.Outcome.String()
		o.waits.WithLabelValues(ns, label).Inc()
		o.waitSeconds.WithLabelValues(ns, label).Observe(e.Duration.Seconds())
		if e.Outcome == cache.Waited {
			o.saved.WithLabelValues(ns).Inc()
		}
	case cache.EventFencedOut:
		o.fencedOut.WithLabelValues(ns).Inc()
	case cache.EventCorrupt:
		o.corrupt.WithLabelValues(ns).Inc()
	case cache.EventRedisError:
		o.redisErrors.WithLabelValues(ns).Inc()
	case cache.EventBreakerOpen:
		o.breakerOpen.WithLabelValues(ns).Set(1)
		o.trans.WithLabelValues(ns, "open").Inc()
	case cache.EventBreakerClosed:
		o.breakerOpen.WithLabelValues(ns).Set(0)
		o.trans.WithLabelValues(ns, "closed").Inc()
	}
}
