package robustness

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/stampede-go/stampede/internal/redisserver"
)

var (
	profile = flag.String("robustness.profile", "short", `"short" (CI) or "long" (before a release)`)
	seed    = flag.Int64("robustness.seed", 0, "the seed to replay (0: a new one per run, printed)")
	outDir  = flag.String("robustness.out", "", "where a failing run's history and pictures go (default: a directory under $TMPDIR, printed)")
	recheck = flag.String("robustness.recheck", "", "a saved history.json to check again, with the checker as it is now (TestRecheck)")
)

var (
	binOnce sync.Once
	bin     string
	binErr  error
)

// replicaBin builds the replica program once per test binary.
func replicaBin(t *testing.T) string {
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "stampede-replica-")
		if err != nil {
			binErr = err
			return
		}
		bin, binErr = buildReplica(dir)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return bin
}

// TestRobustness runs every scenario of the profile with random traffic
// and faults, and checks the recorded history against the README's
// promises. On a violation it saves the history and prints the seed that
// replays the run's traffic and faults:
//
//	go test -C robustness . -run 'TestRobustness/NAME' -robustness.seed=SEED
func TestRobustness(t *testing.T) {
	if testing.Short() {
		t.Skip("the robustness suite runs replicas and servers for minutes")
	}
	if _, err := redisserver.LookPath(""); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	b := replicaBin(t)
	for _, sc := range Profile(*profile) {
		t.Run(sc.Name, func(t *testing.T) {
			s := *seed
			if s == 0 {
				s = time.Now().UnixNano()
			}
			h, err := Run(sc, s, b)
			if err != nil {
				t.Fatalf("seed %d: %v", s, err)
			}
			vs, cov := CheckCoverage(sc, h)
			twins := 0
			for _, o := range h.Ops {
				if o.Req.Twin {
					twins++
				}
			}
			t.Logf("seed %d: %d operations (%d on twin caches), %d computes, %d faults; computes of a key overlapping: %d, excused %d; one compute judged over %.0f%% of the run; computes while a fresh value was stored: %d, excused %d; joiners not selected by the run they joined: %d; %d violations",
				s, len(h.Ops), twins, len(h.Computes), len(h.Events)/2, cov.Overlaps, cov.Excused, 100*cov.Judged, cov.Recomputes, cov.RecomputesExcused, cov.Unselected, len(vs))
			if len(vs) == 0 {
				return
			}
			dir := save(t, sc, h, vs)
			for i, v := range vs {
				if i == 10 {
					t.Errorf("... and %d more (all in %s)", len(vs)-10, dir)
					break
				}
				t.Error(v)
			}
			t.Errorf("replay: go test -C robustness . -run 'TestRobustness/%s$' -robustness.seed=%d; history in %s", sc.Name, s, dir)
		})
	}
}

// TestRecheck checks a saved history again, without running anything: a
// changed checker is judged on the very history that made it change.
//
//	go test -C robustness . -run TestRecheck -robustness.recheck=DIR/history.json
func TestRecheck(t *testing.T) {
	if *recheck == "" {
		t.Skip("no -robustness.recheck history given")
	}
	h, err := LoadHistory(*recheck)
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := ScenarioNamed(h.Scenario)
	if !ok {
		t.Fatalf("%s: no scenario named %q in any profile", *recheck, h.Scenario)
	}
	vs, cov := CheckCoverage(sc, h)
	for _, v := range vs {
		t.Error(v)
	}
	t.Logf("%s (seed %d): %d operations, %d violations; computes while a fresh value was stored: %d, excused %d",
		h.Scenario, h.Seed, len(h.Ops), len(vs), cov.Recomputes, cov.RecomputesExcused)
}

// save writes a failing run's history, violations and, for a register that
// is not linearizable, porcupine's picture of it.
func save(t *testing.T, sc Scenario, h *History, vs []Violation) string {
	dir := *outDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "stampede-robustness")
	}
	dir = filepath.Join(dir, fmt.Sprintf("%s-%d", sc.Name, h.Seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Log(err)
		return dir
	}
	if err := h.Save(filepath.Join(dir, "history.json")); err != nil {
		t.Log(err)
	}
	for name, logs := range h.Logs {
		if err := os.WriteFile(filepath.Join(dir, "stderr-"+name+".txt"), []byte(logs), 0o644); err != nil {
			t.Log(err)
		}
	}
	var b strings.Builder
	for _, v := range vs {
		b.WriteString(v.String() + "\n\n")
		if v.info != nil {
			p := filepath.Join(dir, strings.ReplaceAll(v.Detail, " ", "-")+".html")
			if err := porcupine.VisualizePath(registerModel, *v.info, p); err != nil {
				t.Log(err)
			}
		}
	}
	b.WriteString("faults:\n")
	for _, e := range h.Events {
		fmt.Fprintf(&b, "  %s %s\n", ms(e.At), e.What)
	}
	if err := os.WriteFile(filepath.Join(dir, "violations.txt"), []byte(b.String()), 0o644); err != nil {
		t.Log(err)
	}
	return dir
}
