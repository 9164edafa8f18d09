// Command headline reads the results.json of several runs of the bench's
// default suite and prints the README's headline figures as a markdown
// table: each figure's median over the runs with its min–max. Ratios are
// taken within each run (side by side), then summarised.
//
//	go run -C bench ./headline run1/results.json run2/results.json run3/results.json
//
// scripts/headline runs the suite and calls it.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// result is the part of one bench result the headline figures read.
type result struct {
	Scenario      string  `json:"scenario"`
	Strategy      string  `json:"strategy"`
	Keys          string  `json:"keys"`
	CallsPerExp   float64 `json:"origin_calls_per_expiry"`
	ThroughputRPS float64 `json:"throughput_rps"`
	Latency       struct {
		P99 float64 `json:"P99"`
	} `json:"latency_ms"`
	FillToWaiter *struct {
		P50 float64 `json:"P50"`
	} `json:"fill_to_waiter_ms"`
	RedisBytesKey float64 `json:"redis_bytes_per_key"`
}

// report is one run.
type report struct {
	Command string   `json:"command"`
	Machine string   `json:"machine"`
	Config  string   `json:"config"`
	Results []result `json:"results"`
}

// find returns the result of a scenario, key distribution (by prefix:
// "zipf" matches "zipf-1000") and strategy.
func (r report) find(scenario, keys, strategy string) (result, bool) {
	for _, x := range r.Results {
		if x.Scenario == scenario && strings.HasPrefix(x.Keys, keys) && x.Strategy == strategy {
			return x, true
		}
	}
	return result{}, false
}

// figure is one headline figure, read from one run.
type figure struct {
	name, unit string
	read       func(report) (float64, bool)
}

func callsPerExpiry(keys, strategy string) figure {
	return figure{fmt.Sprintf("origin calls per expiry, %s, %s key(s)", strategy, keys), "",
		func(r report) (float64, bool) {
			x, ok := r.find("storm", keys, strategy)
			return x.CallsPerExp, ok
		}}
}

func ratio(name, scenario, keys, a, b string, value func(result) float64) figure {
	return figure{name, "×", func(r report) (float64, bool) {
		x, ok1 := r.find(scenario, keys, a)
		y, ok2 := r.find(scenario, keys, b)
		if !ok1 || !ok2 || value(y) <= 0 || value(x) <= 0 {
			return 0, false
		}
		return value(x) / value(y), true
	}}
}

func p99(keys, strategy string) figure {
	return figure{fmt.Sprintf("caller p99, %s, %s key(s)", strategy, keys), " ms",
		func(r report) (float64, bool) {
			x, ok := r.find("storm", keys, strategy)
			return x.Latency.P99, ok
		}}
}

func fillToWaiter(keys, strategy string) figure {
	return figure{fmt.Sprintf("fill→waiter p50, %s, %s keys", strategy, keys), " ms",
		func(r report) (float64, bool) {
			x, ok := r.find("storm", keys, strategy)
			if !ok || x.FillToWaiter == nil {
				return 0, false
			}
			return x.FillToWaiter.P50, true
		}}
}

var figures = []figure{
	callsPerExpiry("hot", "stampede-wait"),
	callsPerExpiry("hot", "stampede-stale"),
	callsPerExpiry("zipf", "stampede-wait"),
	callsPerExpiry("zipf", "stampede-stale"),
	callsPerExpiry("hot", "singleflight"),
	callsPerExpiry("hot", "go-redis-cache"),
	callsPerExpiry("hot", "sturdyc"),
	callsPerExpiry("hot", "redislock-poll"),
	callsPerExpiry("hot", "cache-aside"),
	ratio("hit-path throughput, stampede-wait ÷ go-redis-cache (hits, one hot key)", "hits", "hot", "stampede-wait", "go-redis-cache",
		func(x result) float64 { return x.ThroughputRPS }),
	ratio("hit-path throughput, stampede-wait ÷ raw GET (hits, one hot key)", "hits", "hot", "stampede-wait", "raw-get",
		func(x result) float64 { return x.ThroughputRPS }),
	p99("zipf", "stampede-wait"),
	p99("hot", "stampede-stale"),
	fillToWaiter("zipf", "stampede-wait"),
	fillToWaiter("zipf", "redislock-poll"),
	ratio("Redis memory per key, stampede-wait ÷ cache-aside (zipf keys, same value bytes)", "storm", "zipf", "stampede-wait", "cache-aside",
		func(x result) float64 { return x.RedisBytesKey }),
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "headline:", err)
		os.Exit(1)
	}
}

func run(paths []string, out io.Writer) error {
	if len(paths) == 0 {
		return errors.New("usage: headline results.json [results.json ...]")
	}
	var runs []report
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		runs = append(runs, r)
	}
	fmt.Fprintf(out, "Median of %d runs of `%s`, min–max beside it (ratios taken within each run).\n\n", len(runs), withoutOut(runs[0].Command))
	fmt.Fprintf(out, "Machine: %s\n\nConfig: %s\n\n", runs[0].Machine, runs[0].Config)
	fmt.Fprintln(out, "| figure | median | min–max | runs |")
	fmt.Fprintln(out, "|---|---|---|---|")
	for _, f := range figures {
		var vals []float64
		for _, r := range runs {
			if v, ok := f.read(r); ok {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			fmt.Fprintf(out, "| %s | n/a | | 0 |\n", f.name)
			continue
		}
		med, lo, hi := summarize(vals)
		fmt.Fprintf(out, "| %s | **%s%s** | %s–%s | %d |\n", f.name, num(med), f.unit, num(lo), num(hi), len(vals))
	}
	return nil
}

// withoutOut drops the -out flag and its directory from a command line:
// where a run wrote its files does not change its figures.
func withoutOut(cmd string) string {
	f := strings.Fields(cmd)
	if i := slices.Index(f, "-out"); i >= 0 && i+1 < len(f) {
		f = slices.Delete(f, i, i+2)
	}
	return strings.Join(f, " ")
}

// summarize returns the median, min and max of vals (not empty).
func summarize(vals []float64) (med, lo, hi float64) {
	s := slices.Clone(vals)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
