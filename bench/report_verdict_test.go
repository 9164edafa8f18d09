package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// storm is a storm result of strategy with calls origin calls per expiry.
func stormResult(keys, strategy string, calls float64) Result {
	return Result{Scenario: "storm", Keys: keys, Strategy: strategy, Replicas: 3, Callers: 50,
		Expiries: 100, OriginCalls: int64(calls * 100), CallsPerExp: calls, Outcomes: map[string]int64{"hit": 1}}
}

// The terminal output leads with the verdict: every strategy's origin calls
// per expiry side by side and whether the stampede was stopped, then the
// full table, then where the charts are.
func TestSummaryLeadsWithTheVerdict(t *testing.T) {
	results := []Result{
		stormResult("hot", "no-cache", 4850), stormResult("hot", "singleflight", 3),
		stormResult("hot", "stampede-wait", 1), stormResult("hot", "stampede-l1", 1),
		stormResult("zipf-1000", "no-cache", 212), stormResult("zipf-1000", "stampede-wait", 1.4),
		{Scenario: "hits", Keys: "hot", Strategy: "stampede-l1", Replicas: 3, Outcomes: map[string]int64{"hit": 1}},
		{Scenario: "http", Keys: "hot", Strategy: "middleware-off", Replicas: 3, Expiries: 10, CallsPerExp: 40, Outcomes: map[string]int64{"origin": 1}},
		{Scenario: "http", Keys: "hot", Strategy: "middleware-on", Replicas: 3, Expiries: 10, CallsPerExp: 1, Outcomes: map[string]int64{"HIT": 1}},
	}
	var out bytes.Buffer
	writeSummary(&out, results, "")
	text := out.String()
	verdict := strings.Index(text, "Verdict: origin calls per key expiry")
	full := strings.Index(text, "Full table:")
	table := strings.Index(text, strings.Join(tableHeader[:2], "  "))
	charts := strings.Index(text, "Charts: add -out DIR")
	if verdict != 0 || full < verdict || table < full || charts < table {
		t.Fatalf("want the verdict first, then the full table, then the charts line; got:\n%s", text)
	}
	head := text[:full]
	for _, want := range []string{
		"strategy        storm/hot  storm/zipf-1000  http/hot\n",
		"no-cache             4850              212\n",
		"stampede-wait        1.00             1.40\n",
		"middleware-on                                   1.00\n",
		"storm/hot (3 replicas x 50 callers): stampede stopped: one origin call per expiry (without a cache: 4850)",
		"storm/zipf-1000 (3 replicas x 50 callers): stampede NOT stopped: stampede-wait made 1.40 origin calls per expiry (without a cache: 212)",
		"http/hot (3 instances): stampede stopped: one origin call per expiry (without the middleware: 40.00)",
	} {
		if !strings.Contains(head, want) {
			t.Errorf("the verdict lacks %q:\n%s", want, head)
		}
	}
	if strings.Contains(head, "hits") {
		t.Errorf("the verdict names the hits scenario, whose key never expires:\n%s", head)
	}
	if lines := strings.Count(head, "\n"); lines > 12 {
		t.Errorf("the verdict is %d lines: a few lines to read, not a table of everything", lines)
	}

	out.Reset()
	writeSummary(&out, results, "out")
	if !strings.Contains(out.String(), "Figures in out/results.md and results.json. Charts in out/: latency-cdf-storm-hot.png, origin-calls-per-expiry-storm-hot.png, latency-cdf-storm-zipf-1000.png, origin-calls-per-expiry-storm-zipf-1000.png, latency-cdf-hits-hot.png, latency-cdf-http-hot.png, origin-calls-per-expiry-http-hot.png.\n") {
		t.Errorf("with -out, the charts line does not say where they are:\n%s", out.String())
	}
}

// A run of the faults scenario alone counts no expiries: no verdict, the
// table first.
func TestSummaryWithoutExpiriesHasNoVerdict(t *testing.T) {
	var out bytes.Buffer
	writeSummary(&out, []Result{{Scenario: "faults", Keys: "hot", Strategy: "stampede-wait", Phase: "healthy", Outcomes: map[string]int64{"hit": 1}}}, "")
	if strings.Contains(out.String(), "Verdict") || !strings.HasPrefix(out.String(), strings.Join(faultsHeader[:2], "  ")) {
		t.Errorf("want the faults table first and no verdict:\n%s", out.String())
	}
}

// The configuration line names the settings of the scenarios that run
// only: no faults settings when the faults scenario does not run.
func TestConfigLineNamesOnlyTheScenariosThatRun(t *testing.T) {
	cfg, err := parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.describe(); strings.Contains(d, "faults") || !strings.Contains(d, "http:") {
		t.Errorf("default run: %q: want the http settings and no faults ones", d)
	}
	cfg, err = parse([]string{"-scenarios", "faults"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.describe(); !strings.Contains(d, "faults:") || strings.Contains(d, "http:") {
		t.Errorf("faults run: %q: want the faults settings and no http ones", d)
	}
}
