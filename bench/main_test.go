package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The short mode CI runs: every strategy for a second on a small size. The
// run completes, its figures are sane, stampede computes exactly once per
// expiry, and the output files parse.
func TestShortRun(t *testing.T) {
	t.Parallel() // the two load runs wait on their phases more than they use the CPUs
	dir := t.TempDir()
	var out bytes.Buffer
	getenv := redistest.Getenv(t)
	rep, err := run(context.Background(), []string{"-short", "-out", dir}, &out, io.Discard, getenv)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := len(strategies)*2 + 3 + 2*2 // storm x 2 dists, hits, http x 2 dists
	if len(rep.Results) != want {
		t.Fatalf("%d results, want %d", len(rep.Results), want)
	}
	for _, r := range rep.Results {
		name := r.Scenario + "/" + r.Keys + "/" + r.Strategy
		var outcomes int64
		for _, n := range r.Outcomes {
			if n < 0 {
				t.Errorf("%s: negative outcome count", name)
			}
			outcomes += n
		}
		switch {
		case r.Requests <= 0 || r.DurationSec <= 0 || r.ThroughputRPS <= 0:
			t.Errorf("%s: no load: %+v", name, r)
		case outcomes != r.Requests:
			t.Errorf("%s: outcomes add up to %d of %d requests", name, outcomes, r.Requests)
		case r.Errors != 0:
			t.Errorf("%s: %d errors", name, r.Errors)
		case r.OriginCalls < r.Expiries || r.PeakOrigin < 0 || r.RedisCommands < 0:
			t.Errorf("%s: figures do not add up: calls %d expiries %d peak %d cmds %d", name, r.OriginCalls, r.Expiries, r.PeakOrigin, r.RedisCommands)
		case r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max:
			t.Errorf("%s: percentiles out of order: %+v", name, r.Latency)
		}
		if strings.HasPrefix(r.Strategy, "stampede") || r.Strategy == "middleware-on" {
			if r.Scenario != "hits" && r.CallsPerExp != 1 {
				t.Errorf("%s: %.3f origin calls per expiry (%d calls, %d expiries), want exactly 1", name, r.CallsPerExp, r.OriginCalls, r.Expiries)
			}
		}
		// An in-process-only peer stampedes: about R calls per expiry on the
		// hot key, a little fewer when a replica reads another's fresh value
		// in time (2.67 of R=3 was seen on a quiet machine), never near 1.
		if r.Scenario == "storm" && r.Keys == "hot" && r.InProcessOnly && r.CallsPerExp < float64(r.Replicas)/2 {
			t.Errorf("%s: in-process-only peer at %.2f calls per expiry, below R/2 (R=%d)", name, r.CallsPerExp, r.Replicas)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var decoded Report
	if err := json.Unmarshal(b, &decoded); err != nil || len(decoded.Results) != want {
		t.Fatalf("results.json: %v (%d results)", err, len(decoded.Results))
	}
	if md, err := os.ReadFile(filepath.Join(dir, "results.md")); err != nil || !strings.Contains(string(md), "| storm | hot | stampede-wait |") {
		t.Fatalf("results.md: %v", err)
	}
	charts, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	// a CDF per scenario and distribution (5), a calls-per-expiry chart for
	// each but hits (whose key never expires)
	if len(charts) != 2*5-1 {
		t.Fatalf("%d charts: %v", len(charts), charts)
	}
	// The terminal names the charts written, and they are these.
	for _, name := range chartFiles(rep.Results) {
		if !slices.Contains(charts, filepath.Join(dir, name)) {
			t.Errorf("the output names chart %s, which was not written (written: %v)", name, charts)
		}
		if !strings.Contains(out.String(), name) {
			t.Errorf("the terminal output does not name chart %s", name)
		}
	}
	if !strings.HasPrefix(strings.SplitN(out.String(), "\n\n", 2)[1], "Verdict: ") {
		t.Errorf("the output after its header does not start with the verdict:\n%s", out.String())
	}
	for _, c := range charts {
		f, err := os.Open(c)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 100 {
			t.Fatalf("%s is not a valid chart: %v", c, err)
		}
	}
	if !strings.Contains(out.String(), "REDIS_URL") || !strings.Contains(out.String(), "stampede-wait") {
		t.Fatalf("terminal output:\n%s", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-replicas", "0"}, {"-strategies", "nope"}, {"-scenarios", "x"}, {"-dists", "y"}, {"-ttl", "1ms"}, {"-duration", "0s"},
		{"-fleet-replicas", "0"}, {"-fleet-caches", "x"}, {"-fleet-topologies", "ring"}, {"-fleet-runs", "0"}, {"-fleet-writes", "2"}} {
		if _, err := parse(args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// The faults scenario, very briefly: every strategy goes through every
// phase and has a row for each in the terminal and the markdown table;
// each fault really was injected (the peers without protection show it);
// stampede answers every caller in every phase.
func TestFaultsScenario(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out bytes.Buffer
	args := []string{"-short", "-scenarios", "faults", "-dists", "hot", "-replicas", "2", "-callers", "5",
		"-fault-phase", "400ms", "-fault-settle", "200ms", "-out", dir}
	rep, err := run(context.Background(), args, &out, io.Discard, redistest.Getenv(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, r := range rep.Results {
		if r.Scenario != "faults" || r.Keys != "hot" {
			t.Fatalf("unexpected result %s/%s/%s", r.Scenario, r.Keys, r.Strategy)
		}
		got[r.Strategy+"/"+r.Phase] = r
	}
	if len(rep.Results) != len(strategies)*len(faultPhases) || len(got) != len(rep.Results) {
		t.Fatalf("%d results (%d distinct), want %d x %d", len(rep.Results), len(got), len(strategies), len(faultPhases))
	}
	lines := strings.Split(out.String(), "\n")
	for _, def := range strategies {
		for _, ph := range faultPhaseNames() {
			name := def.name + "/" + ph
			r, ok := got[name]
			if !ok {
				t.Errorf("%s: no result", name)
				continue
			}
			var outcomes int64
			for _, n := range r.Outcomes {
				outcomes += n
			}
			switch {
			case r.Requests <= 0 || r.DurationSec <= 0:
				t.Errorf("%s: no load: %+v", name, r)
			case outcomes != r.Requests:
				t.Errorf("%s: outcomes add up to %d of %d requests", name, outcomes, r.Requests)
			case r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max:
				t.Errorf("%s: percentiles out of order: %+v", name, r.Latency)
			case r.OriginPerSec < 0 || r.Errors < 0 || r.Errors > r.Requests:
				t.Errorf("%s: figures do not add up: %+v", name, r)
			}
			if ph == "healthy" && r.Errors != 0 {
				t.Errorf("%s: %d errors with nothing wrong", name, r.Errors)
			}
			if strings.HasPrefix(def.name, "stampede") && r.Errors != 0 {
				t.Errorf("%s: %d of %d callers got an error (outcomes %v)", name, r.Errors, r.Requests, r.Outcomes)
			}
			if !slices.ContainsFunc(lines, func(l string) bool {
				f := strings.Fields(l)
				return len(f) > 3 && f[0] == "hot" && f[1] == def.name && f[2] == ph
			}) {
				t.Errorf("%s: no row in the terminal table", name)
			}
			if !strings.Contains(string(md), "| hot | "+def.name+" | "+ph+" |") {
				t.Errorf("%s: no row in results.md", name)
			}
		}
	}
	// The faults were there: a peer that asks Redis first slowed to a
	// crawl while Redis refused connections (go-redis re-dials with backoff
	// for longer than this short outage, so its calls fail or ride it
	// out); every call paid the added latency while
	// Redis was slow; every call of the origin failed while it failed.
	if up, down := got["cache-aside/healthy"], got["cache-aside/redis-down"]; down.ThroughputRPS > up.ThroughputRPS/4 {
		t.Errorf("cache-aside with Redis down: %.0f req/s, healthy %.0f req/s", down.ThroughputRPS, up.ThroughputRPS)
	}
	// At least the one way: past the round trip (300 ms) a step may end at
	// the client's own timeouts, before the reply.
	if r := got["cache-aside/redis-slow"]; r.Latency.P50 < float64(faultLatency/time.Millisecond) {
		t.Errorf("cache-aside with Redis slowed by %s each way: p50 %.1f ms", faultLatency, r.Latency.P50)
	}
	// The ramp went past half way within the phase: a call paid a round
	// trip of at least faultLatency (the phase's end, which takes the
	// latency away, shortens the calls still in flight).
	if r := got["cache-aside/redis-slowing"]; r.Latency.Max < float64(faultLatency/time.Millisecond) {
		t.Errorf("cache-aside with Redis slowing to %s each way: max %.1f ms", faultLatency, r.Latency.Max)
	}
	if r := got["no-cache/origin-failing"]; r.Errors != r.Requests || r.OriginPerSec <= 0 {
		t.Errorf("no-cache with the origin failing: %d errors of %d requests, %.1f origin calls/s", r.Errors, r.Requests, r.OriginPerSec)
	}
	if r := got["stampede-wait/origin-failing"]; r.Outcomes["stale-if-error"] == 0 {
		t.Errorf("stampede-wait with the origin failing: no stale-if-error answers: %v", r.Outcomes)
	}
}
