package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
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
	case r.Requests > 0:
		r.CmdsPerReq = float64(r.RedisCommands) / float64(r.Requests)
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

// commandCalls sums the calls of every command in INFO commandstats; -1
// when the server does not say (the in-process server does not).
func commandCalls(ctx context.Context, rdb *redis.Client) int64 {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return -1
	}
	var total int64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		_, stats, _ := strings.Cut(line, ":")
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

// commandsBetween is the commands run between two readings, or -1.
func commandsBetween(before, after int64) int64 {
	if before < 0 || after < 0 {
		return -1
	}
	return after - before
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
	return []string{r.Scenario, r.Keys, r.Strategy, fmt.Sprintf("%.2f", r.CallsPerExp), strconv.FormatInt(r.PeakOrigin, 10),
		fmtMs(r.Latency.P50), fmtMs(r.Latency.P90), fmtMs(r.Latency.P99), fmtMs(r.Latency.P999), fmtMs(r.Latency.Max),
		strconv.FormatFloat(r.ThroughputRPS, 'f', 0, 64), cmds(r.CmdsPerReq), strconv.FormatInt(r.Errors, 10), outcomeMix(r.Outcomes)}
}

func cmds(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

// writeTable prints an aligned table for the terminal.
func writeTable(w io.Writer, results []Result) {
	rows := [][]string{tableHeader}
	for _, r := range results {
		rows = append(rows, r.row())
	}
	widths := make([]int, len(tableHeader))
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
			if i >= 3 {
				fmt.Fprintf(&b, "%*s  ", widths[i], c)
			} else {
				fmt.Fprintf(&b, "%-*s  ", widths[i], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func writeMarkdown(w io.Writer, rep Report) {
	fmt.Fprintf(w, "Command: `%s`\n\nRedis: %s", rep.Command, rep.Redis)
	if !rep.Comparable {
		fmt.Fprint(w, " — **figures from an in-process server: not comparable to a real Redis**")
	}
	fmt.Fprintf(w, "\n\nMachine: %s\n\nConfig: %s\n\n", rep.Machine, rep.Config)
	fmt.Fprintln(w, "| "+strings.Join(tableHeader, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(tableHeader)))
	for _, r := range rep.Results {
		fmt.Fprintln(w, "| "+strings.Join(r.row(), " | ")+" |")
	}
	fmt.Fprintln(w, "\nLatency, throughput and outcomes leave out the first fifth of each run (the cold start); origin calls count it.")
	fmt.Fprintln(w, "\n| scenario | keys | strategy | heap after warm-up (MB) | heap at end (MB) | fills fenced out | background refreshes |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rep.Results {
		if r.Scenario != "storm" {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.1f | %.1f | %d | %d |\n", r.Scenario, r.Keys, r.Strategy, r.HeapWarmMB, r.HeapEndMB, r.FencedOut, r.Refreshes)
	}
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
					fmt.Fprintf(p.w, "%-44s %5.1fs/%.0fs  %9d requests\n", name, time.Since(started).Seconds(), total.Seconds(), requests.Load())
					return
				}
				fmt.Fprintf(p.w, "\r%-44s %5.1fs/%.0fs  %9d requests\n", name, time.Since(started).Seconds(), total.Seconds(), requests.Load())
				return
			case <-t.C:
				if p.live {
					fmt.Fprintf(p.w, "\r%-44s %5.1fs/%.0fs  %9d requests", name, time.Since(started).Seconds(), total.Seconds(), requests.Load())
				}
			}
		}
	}()
	p.stop = func() { close(done); <-finished }
}
