package main

// The figures of a run: a Result per strategy and key distribution (its
// latencies and CDF from the histogram), the Report of the whole run, and
// writeOutputs, which saves it (results.json, results.md, the charts).

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency holds caller latency percentiles in milliseconds.
type Latency struct {
	P50, P90, P99, P999, Max float64
}

// Result is one strategy's run on one key distribution.
type Result struct {
	Scenario      string           `json:"scenario"`
	Strategy      string           `json:"strategy"`
	Keys          string           `json:"keys"`
	Description   string           `json:"description"`
	Replicas      int              `json:"replicas"`
	Callers       int              `json:"callers_per_replica,omitempty"`
	InProcessOnly bool             `json:"in_process_only"`
	DurationSec   float64          `json:"duration_sec"`
	Requests      int64            `json:"requests"`
	AllRequests   int64            `json:"requests_all"` // cold start included: what Redis commands are counted over
	Errors        int64            `json:"errors"`
	OriginCalls   int64            `json:"origin_calls"`
	Expiries      int64            `json:"expiries"`
	CallsPerExp   float64          `json:"origin_calls_per_expiry"`
	PeakOrigin    int64            `json:"peak_origin_concurrency"`
	Latency       Latency          `json:"latency_ms"`
	ThroughputRPS float64          `json:"throughput_rps"`
	Outcomes      map[string]int64 `json:"outcomes"`
	RedisCommands int64            `json:"redis_commands"`
	CmdsPerReq    float64          `json:"redis_commands_per_request"`
	HeapWarmMB    float64          `json:"heap_after_warmup_mb"`
	HeapEndMB     float64          `json:"heap_end_mb"`
	FencedOut     uint64           `json:"fenced_out,omitempty"`
	Refreshes     uint64           `json:"background_refreshes,omitempty"`
	Events        map[string]int64 `json:"events,omitempty"`
	CDF           []CDFPoint       `json:"latency_cdf"`

	// Per-strategy Redis figures (storm): keys under the run's prefix at
	// its end, the Redis memory each held (-1: unknown), commands per
	// request by command, and the fill-to-waiter latency: from the moment
	// the origin's compute returned to the return of each caller that
	// waited for another replica's fill (Outcome waited).
	RedisKeys     int64              `json:"redis_keys_at_end,omitempty"`
	RedisBytesKey float64            `json:"redis_bytes_per_key,omitempty"`
	CommandMix    map[string]float64 `json:"redis_commands_per_request_by_command,omitempty"`
	FillToWaiter  *Latency           `json:"fill_to_waiter_ms,omitempty"`
	FillSamples   int64              `json:"fill_to_waiter_samples,omitempty"`

	// Faults scenario: the phase (what was wrong while it ran) and the
	// origin's calls per second in it, also as a ratio of the healthy
	// phase's (a slow Redis must not cost the origin more: issue 30 asks
	// redis-slow for at most 1.10).
	Phase           string  `json:"phase,omitempty"`
	OriginPerSec    float64 `json:"origin_calls_per_sec,omitempty"`
	OriginVsHealthy float64 `json:"origin_vs_healthy,omitempty"`

	cdf []CDFPoint
}

// CDFPoint is one point of a latency CDF.
type CDFPoint struct {
	Percentile float64 `json:"p"`
	Ms         float64 `json:"ms"`
}

func (r *Result) finish(elapsed time.Duration) {
	if r.Expiries > 0 {
		r.CallsPerExp = float64(r.OriginCalls) / float64(r.Expiries)
	}
	if elapsed > 0 {
		r.ThroughputRPS = float64(r.Requests) / elapsed.Seconds()
	}
	switch {
	case r.RedisCommands < 0:
		r.CmdsPerReq = -1
	case r.AllRequests > 0:
		r.CmdsPerReq = float64(r.RedisCommands) / float64(r.AllRequests)
	}
	r.CDF = r.cdf
}

func latencies(h *hdrhistogram.Histogram) Latency {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max())}
}

func cdf(h *hdrhistogram.Histogram) []CDFPoint {
	var out []CDFPoint
	for _, p := range []float64{1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97, 98, 99, 99.5, 99.9, 99.95, 99.99, 100} {
		out = append(out, CDFPoint{Percentile: p, Ms: float64(h.ValueAtQuantile(p)) / 1000})
	}
	return out
}

// Report is a whole run: where it ran and every result.
type Report struct {
	Command    string   `json:"command"`
	Redis      string   `json:"redis"`
	Comparable bool     `json:"comparable"`
	Machine    string   `json:"machine"`
	Config     string   `json:"config"`
	StartedAt  string   `json:"started_at"`
	Results    []Result `json:"results"`
	// Fleet holds the fleet scenario's figures when it ran.
	Fleet *FleetReport `json:"fleet,omitempty"`
}

// writeOutputs writes results.json, results.md and the charts into dir.
func writeOutputs(dir string, rep Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "results.md"))
	if err != nil {
		return err
	}
	writeMarkdown(f, rep)
	if err := f.Close(); err != nil {
		return err
	}
	order, groups := chartGroups(rep.Results)
	for _, g := range order {
		if err := cdfChart(filepath.Join(dir, cdfChartName(g)), g, groups[g]); err != nil {
			return err
		}
		if strings.HasPrefix(g, "hits-") {
			continue // no expiries: no calls-per-expiry chart
		}
		if err := callsChart(filepath.Join(dir, callsChartName(g)), g, groups[g]); err != nil {
			return err
		}
	}
	return nil
}

// chartGroups groups results by scenario and key distribution, a chart
// each ("storm-hot"), in the order they ran.
func chartGroups(results []Result) (order []string, groups map[string][]Result) {
	groups = map[string][]Result{}
	for _, r := range results {
		if r.Scenario == "faults" {
			continue // phases, not expiries: the tables say it
		}
		g := r.Scenario + "-" + r.Keys
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], r)
	}
	return order, groups
}

func cdfChartName(group string) string   { return "latency-cdf-" + group + ".png" }
func callsChartName(group string) string { return "origin-calls-per-expiry-" + group + ".png" }

// chartFiles names the charts writeOutputs writes for results.
func chartFiles(results []Result) []string {
	order, _ := chartGroups(results)
	var out []string
	for _, g := range order {
		out = append(out, cdfChartName(g))
		if !strings.HasPrefix(g, "hits-") {
			out = append(out, callsChartName(g))
		}
	}
	return out
}
