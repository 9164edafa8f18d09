package main

// The report as text: the aligned table printed after a run, and
// results.md with a table per scenario.

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
)

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
	if rep.Fleet != nil {
		fmt.Fprintln(w, "\n#### Fleet")
		fmt.Fprintln(w)
		writeFleet(w, rep.Fleet)
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

// writeSummary prints what a run shows for the terminal: the verdict
// first, a few lines to read, then the full tables, then where the charts
// are (outDir, "" when -out was not given).
func writeSummary(w io.Writer, results []Result, outDir string) {
	if writeVerdict(w, results) {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Full table:")
	}
	writeTable(w, results)
	fmt.Fprintln(w)
	if outDir == "" {
		fmt.Fprintln(w, "Charts: add -out DIR for results.json, results.md and PNG charts (each scenario and key distribution's latency CDF and origin calls per expiry).")
		return
	}
	fmt.Fprintf(w, "Figures in %s/results.md and results.json.", outDir)
	if charts := chartFiles(results); len(charts) > 0 {
		fmt.Fprintf(w, " Charts in %s/: %s.", outDir, strings.Join(charts, ", "))
	}
	fmt.Fprintln(w)
}

// stopsStampedes reports whether a strategy is the library's: the
// stampede-* strategies of the storm, the middleware of the http scenario.
func stopsStampedes(strategy string) bool {
	return strings.HasPrefix(strategy, "stampede") || strategy == "middleware-on"
}

// writeVerdict prints, for each scenario and key distribution whose keys
// expire, every strategy's origin calls per key expiry side by side, and
// whether the library stopped the stampede there: one origin call per
// expiry for the whole fleet. It reports whether it printed anything (the
// hits and faults scenarios count no expiries).
func writeVerdict(w io.Writer, results []Result) bool {
	var groups, strats []string
	calls := map[string]map[string]float64{} // group → strategy → calls per expiry
	sizes := map[string]string{}
	for _, r := range results {
		if r.Scenario == "hits" || r.Scenario == "faults" || r.Expiries == 0 {
			continue
		}
		g := r.Scenario + "/" + r.Keys
		if calls[g] == nil {
			groups = append(groups, g)
			calls[g] = map[string]float64{}
			sizes[g] = fmt.Sprintf("%d replicas", r.Replicas)
			if r.Scenario == "http" {
				sizes[g] = fmt.Sprintf("%d instances", r.Replicas)
			}
			if r.Callers > 0 {
				sizes[g] = fmt.Sprintf("%d replicas x %d callers", r.Replicas, r.Callers)
			}
		}
		if !slices.Contains(strats, r.Strategy) {
			strats = append(strats, r.Strategy)
		}
		calls[g][r.Strategy] = r.CallsPerExp
	}
	if len(groups) == 0 {
		return false
	}
	fmt.Fprintln(w, "Verdict: origin calls per key expiry (1.00: one call for the whole fleet; more is a stampede)")
	rows := [][]string{append([]string{"strategy"}, groups...)}
	for _, s := range strats {
		row := []string{s}
		for _, g := range groups {
			if v, ok := calls[g][s]; ok {
				row = append(row, fmtCalls(v))
			} else {
				row = append(row, "")
			}
		}
		rows = append(rows, append(row, ""))
	}
	rows[0] = append(rows[0], "")
	printAligned(w, rows, 1)
	for _, g := range groups {
		worst, worstName, ours := 0.0, "", 0
		for s, v := range calls[g] {
			if stopsStampedes(s) {
				ours++
				if v > worst || worstName == "" {
					worst, worstName = v, s
				}
			}
		}
		switch {
		case ours == 0:
			continue
		// Two decimals, as printed: a run whose every expiry cost one
		// call prints 1.00.
		case worst < 1.005:
			fmt.Fprintf(w, "%s (%s): stampede stopped: one origin call per expiry", g, sizes[g])
		default:
			fmt.Fprintf(w, "%s (%s): stampede NOT stopped: %s made %.2f origin calls per expiry", g, sizes[g], worstName, worst)
		}
		if v, ok := calls[g]["no-cache"]; ok {
			fmt.Fprintf(w, " (without a cache: %s)", fmtCalls(v))
		} else if v, ok := calls[g]["middleware-off"]; ok {
			fmt.Fprintf(w, " (without the middleware: %s)", fmtCalls(v))
		}
		fmt.Fprintln(w)
	}
	return true
}

// fmtCalls prints origin calls per expiry: two decimals, none from 100 on.
func fmtCalls(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
