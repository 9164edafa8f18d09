package stampedeprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/contrib/prometheus"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Real caches on a real Redis move the right series.
func TestSeriesMoveWithTheCache(t *testing.T) {
	obs := stampedeprom.New(stampedeprom.Options{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(obs)
	ns := redistest.Prefix(t)
	var caches []*cache.Cache[string]
	for range 2 {
		c, err := cache.New[string](redistest.Client(t), cache.Options{Namespace: ns, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		caches = append(caches, c)
	}
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	slow := func(context.Context) (string, error) { close(started); <-release; return "v", nil }
	done := make(chan struct{})
	go func() { defer close(done); _, _ = caches[0].GetOrCompute(ctx, "k", slow) }()
	<-started
	waited := make(chan struct{})
	go func() { defer close(waited); _, _ = caches[1].GetOrCompute(ctx, "k", slow) }()
	// Let the second replica find the lease busy before the first fills.
	deadline := time.Now().Add(10 * time.Second)
	for gather(t, reg)[`stampede_lease_busy_total{namespace="`+ns+`"}`] < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second replica never found the lease busy")
		}
		time.Sleep(time.Millisecond) // the wait starts asynchronously: poll for it
	}
	close(release)
	<-done
	<-waited
	_, _ = caches[1].GetOrCompute(ctx, "k", slow)
	_, _ = caches[0].GetOrCompute(ctx, "gone", func(context.Context) (string, error) { return "", cache.ErrNotFound })
	_, _ = caches[0].GetOrCompute(ctx, "gone", func(context.Context) (string, error) { return "", cache.ErrNotFound })
	_, _ = caches[0].GetOrCompute(ctx, "fails", func(context.Context) (string, error) { return "", errors.New("down") })

	want := map[string]float64{
		`stampede_requests_total{namespace="` + ns + `",outcome="miss"}`:     3, // k, gone (a not-found) and fails
		`stampede_requests_total{namespace="` + ns + `",outcome="waited"}`:   1,
		`stampede_requests_total{namespace="` + ns + `",outcome="hit"}`:      1,
		`stampede_requests_total{namespace="` + ns + `",outcome="negative"}`: 1,
		`stampede_recomputes_saved_total{namespace="` + ns + `"}`:            1,
		`stampede_compute_errors_total{namespace="` + ns + `"}`:              1,
	}
	got := gather(t, reg)
	for series, v := range want {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
	if got[`stampede_lease_acquired_total{namespace="`+ns+`"}`] < 3 || got[`stampede_lease_busy_total{namespace="`+ns+`"}`] < 1 {
		t.Errorf("lease series: %v", got)
	}
	for series := range got {
		if strings.Contains(series, `"k"`) || strings.Contains(series, "gone") {
			t.Fatalf("a cache key leaked into a label: %s", series)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "stampede_compute_seconds"); err != nil || n != 1 {
		t.Fatalf("compute histogram series: %d %v", n, err)
	}
}

func TestEveryEventKindHasASeries(t *testing.T) {
	obs := stampedeprom.New(stampedeprom.Options{Prefix: "x"})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(obs)
	for k := cache.EventOutcome; k <= cache.EventBreakerClosed; k++ {
		obs.Observe(context.Background(), cache.Event{Kind: k, Namespace: "n", Outcome: cache.Waited, Err: errors.New("e")})
	}
	got := gather(t, reg)
	for _, series := range []string{
		`x_requests_total{namespace="n",outcome="waited"}`, `x_lease_acquired_total{namespace="n"}`, `x_lease_busy_total{namespace="n"}`,
		`x_lease_extended_total{namespace="n"}`, `x_lease_lost_total{namespace="n"}`, `x_lease_release_rejected_total{namespace="n"}`,
		`x_compute_errors_total{namespace="n"}`, `x_waits_total{namespace="n",outcome="waited"}`, `x_recomputes_saved_total{namespace="n"}`,
		`x_fill_fenced_out_total{namespace="n"}`, `x_corrupt_entries_total{namespace="n"}`, `x_redis_errors_total{namespace="n"}`,
		`x_breaker_transitions_total{namespace="n",state="open"}`, `x_breaker_transitions_total{namespace="n",state="closed"}`,
	} {
		if got[series] != 1 {
			t.Errorf("%s = %v", series, got[series])
		}
	}
	if got[`x_breaker_open{namespace="n"}`] != 0 {
		t.Errorf("breaker gauge after close: %v", got[`x_breaker_open{namespace="n"}`])
	}
}

// gather flattens counters and gauges into "name{labels}" -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			name := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count{"+strings.Join(labels, ",")+"}"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}
