package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/internal/redistest"
)

// fleetEnv points the bench at a redis-server of the test's own: the
// fleet's figures are Redis' whole counters, which the package's shared
// server mixes with the other tests' commands.
func fleetEnv(t *testing.T) func(string) string {
	t.Helper()
	servers, _ := redistest.Independent(t, 1)
	url := servers[0].URL()
	return func(k string) string {
		if k == "REDIS_URL" {
			return url
		}
		return ""
	}
}

// The fleet scenario runs on a single Redis and on a 3-master Cluster, idle
// and under load, and reports every column: the shapes' table, the
// Cluster's shards and the write cost.
func TestFleetScenarioReportsEveryColumn(t *testing.T) {
	t.Parallel() // its own Redis servers: figures no other test touches
	if _, err := exec.LookPath("redis-cli"); err != nil {
		redistest.Missing(t, "redis-cli (for the scenario's Cluster)", err)
	}
	var out bytes.Buffer
	rep, err := run(context.Background(), []string{"-scenarios", "fleet", "-short", "-fleet-caches", "2",
		"-fleet-write-replicas", "4", "-fleet-write-sets", "10"}, &out, io.Discard, fleetEnv(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if rep.Fleet == nil {
		t.Fatalf("no fleet figures\n%s", out.String())
	}
	want := map[string]int{"single": 1, "cluster": 3} // nodes measured
	seen := map[string]bool{}
	for _, r := range rep.Fleet.Results {
		name := r.Topology + "/" + r.Phase
		seen[name] = true
		if r.Replicas != 4 || r.Caches != 2 || len(r.Runs) != 1 {
			t.Errorf("%s: shape %d × %d with %d runs, want 4 × 2 with 1", name, r.Replicas, r.Caches, len(r.Runs))
			continue
		}
		run := r.Runs[0]
		if len(run.Nodes) != want[r.Topology] {
			t.Errorf("%s: %d nodes measured, want %d", name, len(run.Nodes), want[r.Topology])
		}
		tot := run.total()
		switch {
		case run.Errors != 0:
			t.Errorf("%s: %d errors", name, run.Errors)
		case r.Phase == "load" && (run.ReqPerSec <= 0 || tot.CmdsPerSec <= 0 || tot.BytesPerSec <= 0):
			t.Errorf("%s: no load measured: %+v", name, run)
		case tot.Clients < int64(r.Replicas): // a subscription per replica at least (its caches share it)
			t.Errorf("%s: %d clients for %d replicas", name, tot.Clients, r.Replicas)
		case tot.CmdsPerSec < 0 || tot.CPUPercent < 0 || tot.BytesPerSec < 0:
			t.Errorf("%s: negative figures: %+v", name, tot)
		}
		for i, c := range r.cells() {
			if c == "" || strings.Contains(c, "NaN") || strings.Contains(c, "Inf") || (r.Phase == "load" && c == "—") {
				t.Errorf("%s: column %q is %q", name, fleetColumns[i], c)
			}
		}
	}
	for _, n := range []string{"single/idle", "single/load", "cluster/idle", "cluster/load"} {
		if !seen[n] {
			t.Errorf("no %s result", n)
		}
	}
	if len(rep.Fleet.Writes) != 2 {
		t.Errorf("%d write-cost results, want 2 (single, cluster)", len(rep.Fleet.Writes))
	}
	for _, w := range rep.Fleet.Writes {
		// Every replica is subscribed to the namespace's channel, so a Set
		// costs Redis at least a few bytes per replica.
		if len(w.BytesPerSet) != 1 || w.BytesPerSet[0] < float64(w.Replicas) {
			t.Errorf("%s write cost: %v bytes per Set at %d replicas", w.Topology, w.BytesPerSet, w.Replicas)
		}
	}
	text := out.String()
	for _, s := range append(fleetColumns, "| single | 4 × 2 | idle |", "| cluster | 4 × 2 | load |", "Per shard", "Write cost") {
		if !strings.Contains(text, s) {
			t.Errorf("output lacks %q:\n%s", s, text)
		}
	}
}

// An idle fleet of 64 replicas × 1 cache costs Redis at most one command a
// second per replica, once the heartbeats have stopped (issue 38; what is
// left is the idle probe, a PING every 2 s per client). Measured on Redis'
// own counters over the scenario's idle window, on a server of the test's
// own; the bound leaves room for a loaded machine (the probe alone is 0.5).
func TestFleetIdleCostsAtMostOneCommandPerSecondPerReplica(t *testing.T) {
	t.Parallel() // its own Redis server: figures no other test touches
	var out bytes.Buffer
	rep, err := run(context.Background(), []string{"-scenarios", "fleet", "-fleet-topologies", "single",
		"-fleet-replicas", "64", "-fleet-caches", "1", "-fleet-runs", "1", "-fleet-window", "3s",
		"-fleet-rate", "100", "-fleet-write-replicas", "0"}, &out, io.Discard, fleetEnv(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var checked bool
	for _, r := range rep.Fleet.Results {
		if r.Phase != "idle" {
			continue
		}
		checked = true
		perReplica := r.Runs[0].total().CmdsPerSec / float64(r.Replicas)
		t.Logf("%d × %d idle: %.2f Redis commands/s per replica", r.Replicas, r.Caches, perReplica)
		if perReplica > 1 {
			t.Errorf("%d replicas × %d cache idle: %.2f Redis commands/s per replica, want at most 1\n%s", r.Replicas, r.Caches, perReplica, out.String())
		}
	}
	if !checked {
		t.Fatalf("no idle result\n%s", out.String())
	}
}

// -fleet-before puts a previous run's figures beside this run's, shape by
// shape, and the write cost before and after; a file without fleet
// figures is refused before anything runs.
func TestFleetBeforeAndAfterSideBySide(t *testing.T) {
	shape := func(cmds, clients float64) FleetReport {
		return FleetReport{
			Results: []FleetResult{{Topology: "single", Replicas: 64, Caches: 1, Phase: "load",
				Runs: []FleetRun{{ReqPerSec: 200, FetchPerSec: 180, Nodes: []FleetSample{{CmdsPerSec: cmds, Clients: int64(clients)}}}}}},
			Writes: []FleetWrite{{Topology: "single", Replicas: 512, BytesPerSet: []float64{cmds * 10}}},
		}
	}
	before, after := shape(3200, 192), shape(640, 128)
	var out bytes.Buffer
	writeFleetCompare(&out, &before, &after)
	text := out.String()
	for _, want := range []string{"| single | 64 × 1 | load | 200 | 200 | 50.00 | 10.00 | 16.00 | 3.20 |", "| 3.00 | 2.00 |", "32,000 bytes per Set before, 6,400 after"} {
		if !strings.Contains(text, want) {
			t.Errorf("comparison lacks %q:\n%s", want, text)
		}
	}
	path := t.TempDir() + "/results.json"
	if err := os.WriteFile(path, []byte(`{"results": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(context.Background(), []string{"-scenarios", "fleet", "-fleet-before", path}, io.Discard, io.Discard, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "no fleet figures") {
		t.Fatalf("a -fleet-before without fleet figures: err = %v, want one that says so", err)
	}
}
