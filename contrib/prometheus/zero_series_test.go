package stampedeprom_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/contrib/prometheus"
)

// cacheFamilies are the families the cache Observer exports.
var cacheFamilies = []string{
	"requests_total", "recomputes_saved_total", "lease_acquired_total", "lease_acquire_seconds", "lease_busy_total",
	"lease_extended_total", "lease_lost_total", "lease_release_rejected_total", "compute_seconds", "compute_errors_total",
	"waits_total", "wait_seconds", "fill_fenced_out_total", "corrupt_entries_total", "redis_errors_total",
	"breaker_open", "breaker_transitions_total",
}

// checkZero fails unless reg exports exactly families (with prefix), each
// with at least one series for namespace ns ("" for none), every one at 0.
func checkZero(t *testing.T, reg *prometheus.Registry, prefix, ns string, families []string) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		seen[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			if ns != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != ns) {
				t.Errorf("%s: series %v, want namespace %q", mf.GetName(), m.GetLabel(), ns)
			}
			if v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount()); v != 0 {
				t.Errorf("%s%v = %v, want 0", mf.GetName(), m.GetLabel(), v)
			}
		}
	}
	for _, f := range families {
		if !seen[prefix+"_"+f] {
			t.Errorf("family %s_%s not exported", prefix, f)
		}
	}
	if len(mfs) != len(families) {
		t.Errorf("%d families exported, want %d", len(mfs), len(families))
	}
}

// Issue 27 (metrics): every family is exported at 0 before any event: from
// registration for the namespaces in Options.Namespaces, and from New for
// a cache given the Observer (stampede_breaker_open is 0, not absent).
func TestEveryFamilyExportedAtZero(t *testing.T) {
	t.Run("from registration", func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(stampedeprom.New(stampedeprom.Options{Namespaces: []string{"reports"}}))
		checkZero(t, reg, "stampede", "reports", cacheFamilies)
	})
	t.Run("from New", func(t *testing.T) {
		obs := stampedeprom.New(stampedeprom.Options{Prefix: "x"})
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(obs)
		c, err := cache.New[string](nil, cache.Options{Namespace: "orders", Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		checkZero(t, reg, "x", "orders", cacheFamilies)
		if got := gather(t, reg)[`x_breaker_open{namespace="orders"}`]; got != 0 {
			t.Errorf("breaker_open = %v", got)
		}
	})
	t.Run("lease", func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(stampedeprom.NewLeaseObserver(stampedeprom.Options{}))
		checkZero(t, reg, "stampede", "", []string{
			"lock_acquire_seconds", "lock_acquired_total", "lock_busy_total", "lock_extensions_total", "lock_lost_total",
			"lock_work_seconds", "lock_released_total", "lock_remaining_at_release_seconds", "lock_release_rejected_total",
			"lock_redis_errors_total",
		})
	})
}
