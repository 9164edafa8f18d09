package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
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
}

func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func outcomeMix(m map[string]int64) string {
	var total int64
	for _, n := range m {
		total += n
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f%%", k, 100*float64(m[k])/float64(max(total, 1))))
	}
	return strings.Join(parts, ", ")
}

var tableHeader = []string{"scenario", "keys", "strategy", "origin calls/expiry", "peak origin conc.", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "req/s", "Redis cmds/req", "errors", "outcomes"}

func (r Result) row() []string {
	calls, peak := fmt.Sprintf("%.2f", r.CallsPerExp), strconv.FormatInt(r.PeakOrigin, 10)
	if r.Scenario == "hits" { // the key never expires during the run: there is nothing to count
		calls, peak = "", ""
	}
	return []string{r.Scenario, r.Keys, r.Strategy, calls, peak,
		fmtMs(r.Latency.P50), fmtMs(r.Latency.P90), fmtMs(r.Latency.P99), fmtMs(r.Latency.P999), fmtMs(r.Latency.Max),
		strconv.FormatFloat(r.ThroughputRPS, 'f', 0, 64), cmds(r.CmdsPerReq), strconv.FormatInt(r.Errors, 10), outcomeMix(r.Outcomes)}
}

func cmds(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

// writeTable prints aligned tables for the terminal: the load results,
// the storm's Redis figures, and the faults scenario's phases.
func writeTable(w io.Writer, results []Result) {
	load, redisRows, faultRows := [][]string{tableHeader}, [][]string{redisHeader}, [][]string{faultsHeader}
	for _, r := range results {
		switch r.Scenario {
		case "faults":
			faultRows = append(faultRows, r.faultsRow())
		case "storm":
			redisRows = append(redisRows, r.redisRow())
			load = append(load, r.row())
		default:
			load = append(load, r.row())
		}
	}
	tables := [][][]string{load, redisRows, faultRows}
	lefts := []int{3, 3, 3}
	first := true
	for i, rows := range tables {
		if len(rows) == 1 {
			continue
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		printAligned(w, rows, lefts[i])
	}
}

// printAligned prints rows in columns, the first left columns aligned left,
// the others right, the last one as it comes.
func printAligned(w io.Writer, rows [][]string, left int) {
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row[:len(row)-1] {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i == len(row)-1 {
				b.WriteString(c)
				continue
			}
			if i >= left {
				fmt.Fprintf(&b, "%*s  ", widths[i], c)
			} else {
				fmt.Fprintf(&b, "%-*s  ", widths[i], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

var redisHeader = []string{"keys", "strategy", "Redis keys at end", "Redis B/key", "Redis cmds/req",
	"fill→waiter p50 ms", "p99 ms", "max ms", "waiters timed", "busiest commands per request"}

// redisRow is a storm result's Redis figures: memory, commands, and the
// fill-to-waiter latency.
func (r Result) redisRow() []string {
	bytes := "n/a"
	if r.RedisBytesKey > 0 {
		bytes = strconv.FormatFloat(r.RedisBytesKey, 'f', 0, 64)
	}
	p50, p99, maxMs := "—", "—", "—"
	if f := r.FillToWaiter; f != nil {
		p50, p99, maxMs = fmtMs(f.P50), fmtMs(f.P99), fmtMs(f.Max)
	}
	return []string{r.Keys, r.Strategy, strconv.FormatInt(r.RedisKeys, 10), bytes, cmds(r.CmdsPerReq),
		p50, p99, maxMs, strconv.FormatInt(r.FillSamples, 10), fmtMix(r.CommandMix, 3)}
}

var faultsHeader = []string{"keys", "strategy", "phase", "origin calls/s", "× healthy", "p50 ms", "p99 ms", "max ms", "req/s", "errors", "outcomes"}

// faultsRow is one phase of the faults scenario.
func (r Result) faultsRow() []string {
	vs := "n/a"
	if r.OriginVsHealthy > 0 {
		vs = fmt.Sprintf("%.2f", r.OriginVsHealthy)
	}
	return []string{r.Keys, r.Strategy, r.Phase, strconv.FormatFloat(r.OriginPerSec, 'f', 1, 64), vs,
		fmtMs(r.Latency.P50), fmtMs(r.Latency.P99), fmtMs(r.Latency.Max), strconv.FormatFloat(r.ThroughputRPS, 'f', 0, 64),
		strconv.FormatInt(r.Errors, 10), outcomeMix(r.Outcomes)}
}

func writeMarkdown(w io.Writer, rep Report) {
	fmt.Fprintf(w, "Command: `%s`\n\nRedis: %s", rep.Command, rep.Redis)
	if !rep.Comparable {
		fmt.Fprint(w, " — **figures from an in-process server: not comparable to a real Redis**")
	}
	fmt.Fprintf(w, "\n\nMachine: %s\n\nConfig: %s\n\n", rep.Machine, rep.Config)
	var load, storm, faults []Result
	for _, r := range rep.Results {
		switch r.Scenario {
		case "faults":
			faults = append(faults, r)
		case "storm":
			storm = append(storm, r)
			load = append(load, r)
		default:
			load = append(load, r)
		}
	}
	if len(load) > 0 {
		mdTable(w, tableHeader, load, Result.row)
		fmt.Fprintln(w, "\nLatency, throughput and outcomes leave out the first fifth of each run (the cold start); origin calls and Redis commands per request count it.")
	}
	if len(storm) > 0 {
		fmt.Fprintln(w, "\n| scenario | keys | strategy | heap after warm-up (MB) | heap at end (MB) | fills fenced out | background refreshes |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
		for _, r := range storm {
			fmt.Fprintf(w, "| %s | %s | %s | %.1f | %.1f | %d | %d |\n", r.Scenario, r.Keys, r.Strategy, r.HeapWarmMB, r.HeapEndMB, r.FencedOut, r.Refreshes)
		}
		fmt.Fprintln(w, "\n#### Redis per strategy (storm)")
		fmt.Fprintln(w)
		mdTable(w, redisHeader, storm, Result.redisRow)
		fmt.Fprintln(w, "\nRedis keys at end: keys under the run's prefix when it ended (SCAN). Redis B/key: `used_memory` with those keys minus")
		fmt.Fprintln(w, "`used_memory` after deleting them, in one MULTI/EXEC, per key (connection buffers cancel out). Fill→waiter: from the")
		fmt.Fprintln(w, "moment the origin's compute of a key returned to the return of each caller answered `waited` (it waited for another")
		fmt.Fprintln(w, "replica's fill), after the cold start; — where a strategy has no such callers.")
	}
	if len(faults) > 0 {
		fmt.Fprintln(w, "\n#### Faults")
		fmt.Fprintln(w)
		mdTable(w, append(slices.Clone(faultsHeader), "events"), faults, func(r Result) []string {
			return append(r.faultsRow(), fmtEvents(r.Events))
		})
		fmt.Fprintln(w, "\nEach call is counted in the phase in which it started; phases:")
		fmt.Fprintln(w)
		for _, fp := range faultPhases {
			fmt.Fprintf(w, "- `%s`: %s\n", fp.name, fp.description)
		}
	}
}

// mdTable writes a markdown table of results.
func mdTable(w io.Writer, header []string, results []Result, row func(Result) []string) {
	fmt.Fprintln(w, "| "+strings.Join(header, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(header)))
	for _, r := range results {
		fmt.Fprintln(w, "| "+strings.Join(row(r), " | ")+" |")
	}
}

// fmtEvents prints a cache's event counts, e.g. "breaker_open 8, compute 12".
func fmtEvents(m map[string]int64) string {
	if len(m) == 0 {
		return "—"
	}
	keys := slices.Sorted(maps.Keys(m))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
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
	groups := map[string][]Result{}
	var order []string
	for _, r := range rep.Results {
		if r.Scenario == "faults" {
			continue // phases, not expiries: the tables say it
		}
		g := r.Scenario + "-" + r.Keys
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], r)
	}
	for _, g := range order {
		if err := cdfChart(filepath.Join(dir, "latency-cdf-"+g+".png"), g, groups[g]); err != nil {
			return err
		}
		if strings.HasPrefix(g, "hits-") {
			continue // no expiries: no calls-per-expiry chart
		}
		if err := callsChart(filepath.Join(dir, "origin-calls-per-expiry-"+g+".png"), g, groups[g]); err != nil {
			return err
		}
	}
	return nil
}

// cdfChart draws each strategy's latency CDF, latency on a log axis.
func cdfChart(path, title string, results []Result) error {
	p := plot.New()
	p.Title.Text = "caller latency CDF — " + title
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "percentile"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for i, r := range results {
		pts := make(plotter.XYs, 0, len(r.CDF))
		for _, c := range r.CDF {
			pts = append(pts, plotter.XY{X: math.Max(c.Ms, 0.001), Y: c.Percentile})
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i / 7)
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(r.Strategy, line)
	}
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}

// callsChart draws origin calls per expiry per strategy (ideal: 1) as bars
// on a log10 axis.
func callsChart(path, title string, results []Result) error {
	p := plot.New()
	p.Title.Text = "origin calls per key expiry (ideal 1.00) — " + title
	p.Y.Label.Text = "origin calls per expiry (log scale)"
	vals := make(plotter.Values, len(results))
	names := make([]string, len(results))
	top := 1.0
	for i, r := range results {
		vals[i] = math.Log10(math.Max(r.CallsPerExp, 1))
		top = math.Max(top, vals[i])
		names[i] = fmt.Sprintf("%s\n%.2f", r.Strategy, r.CallsPerExp)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(28))
	if err != nil {
		return err
	}
	bars.Color = plotutil.Color(0)
	p.Add(bars)
	p.NominalX(names...)
	var ticks []plot.Tick
	for e := 0; float64(e) <= math.Ceil(top); e++ {
		ticks = append(ticks, plot.Tick{Value: float64(e), Label: strconv.FormatFloat(math.Pow(10, float64(e)), 'f', 0, 64)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = 0, math.Ceil(top)
	return p.Save(11*vg.Inch, 5*vg.Inch, path)
}

// progress prints a live line: what runs, for how long, how many requests.
type progress struct {
	w    io.Writer
	live bool // rewrite the line in place (a terminal); else one line per run
	stop func()
}

func (p *progress) start(name string, started time.Time, total time.Duration, requests *atomic.Int64) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				if !p.live {
					fmt.Fprintf(p.w, "%-44s %5.1fs/%gs  %9d requests\n", name, time.Since(started).Seconds(), total.Seconds(), requests.Load())
					return
				}
				fmt.Fprintf(p.w, "\r%-44s %5.1fs/%gs  %9d requests\n", name, time.Since(started).Seconds(), total.Seconds(), requests.Load())
				return
			case <-t.C:
				if p.live {
					fmt.Fprintf(p.w, "\r%-44s %5.1fs/%gs  %9d requests", name, time.Since(started).Seconds(), total.Seconds(), requests.Load())
				}
			}
		}
	}()
	p.stop = func() { close(done); <-finished }
}
