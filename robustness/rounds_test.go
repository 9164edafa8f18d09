package robustness

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestShortProfileRunsTheWindowRounds pins what the short profile needs to
// catch the plant classes the random traffic meets only by chance
// (RELIABILITY.md, "Checking the checker"): abandoned-key rounds where a
// value may stand in for a failing origin, announcement rounds where L1
// outlives the round, and a scenario whose every run meets a killed Redis.
func TestShortProfileRunsTheWindowRounds(t *testing.T) {
	var abandon, announce, kill []string
	for _, sc := range Profile("short") {
		o := sc.Options
		if sc.Traffic.Abandon {
			if o.StaleIfError <= 0 {
				t.Errorf("%s: abandoned-key rounds without StaleIfError run nothing", sc.Name)
			}
			abandon = append(abandon, sc.Name)
		}
		if sc.Traffic.Announce {
			// The first value must still be in the readers' L1 when they
			// read again, past the cross-replica window.
			if o.L1Size == 0 || o.L1TTL <= crossReplica+roundMargin+sc.Traffic.Deadline || sc.Mode == "local" || sc.Replicas < 2 {
				t.Errorf("%s: announcement rounds need L1 outliving them and several replicas sharing Redis", sc.Name)
			}
			announce = append(announce, sc.Name)
		}
		for _, o := range sc.Openings {
			if _, ok := nemeses[o]; !ok {
				t.Errorf("%s: opening fault %q is no nemesis", sc.Name, o)
			}
			if o == "redis-kill" {
				kill = append(kill, sc.Name)
			}
		}
	}
	if len(abandon) == 0 || len(announce) == 0 || len(kill) == 0 {
		t.Errorf("abandoned-key rounds in %v, announcement rounds in %v, a redis-kill among the openings in %v: each needs one scenario at least",
			abandon, announce, kill)
	}
}

// TestTrafficNeverDrawsTheRoundsKeys: the rounds' keys are theirs alone, so
// that nothing but a round writes, invalidates or reads them, and no
// register ("r…", the linearizability check's) is among them.
func TestTrafficNeverDrawsTheRoundsKeys(t *testing.T) {
	for _, k := range []string{abandonedKey, announcedKey, probeKey, standInKey, heldKey} {
		if strings.HasPrefix(k, "r") {
			t.Errorf("round key %q reads as a register", k)
		}
	}
	for _, sc := range Profile("short") {
		tr := sc.Traffic
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 20000 {
			req, _ := tr.next(rng, int64(i))
			for _, k := range append([]string{req.Key}, req.Keys...) {
				if k == abandonedKey || k == announcedKey || k == probeKey || k == standInKey || k == heldKey {
					t.Fatalf("%s: the traffic drew the round key %q (%s)", sc.Name, k, req.Op)
				}
			}
		}
	}
}
