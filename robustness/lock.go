package robustness

// The lock workload is Jepsen's lock-set over the lease package's quorum:
// holder processes (lockreplica/) take a lease on one name from five
// independent redis-servers, each through fault proxies of its own, and
// under it read a set from a PostgreSQL row and write it back with an
// element added, claiming the row with the lease's fence first and writing
// only where no higher fence claimed it since. Nemeses pause a holder
// (SIGSTOP) past its lease, cut a holder off from some servers, delay its
// messages, and kill servers and restart them empty, one at a time or as a
// rolling restart. CheckLock then holds the history to the lease package's
// promises: no two holders' work overlapping beyond the drift allowance
// unless the earlier one was paused (then only the fence protects, and the
// checks on the writes say whether it did), fences unique and rising with
// the order of acquisition, the accepted writes' fences strictly increasing
// in commit order, no acknowledged element lost, and no error but the
// documented ones.
//
// This file holds the scenarios, the history and its saving; a holder is
// lock_holder.go, a run lock_run.go, the check lock_checker.go.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/lockreplica/lockwire"
)

// LockScenario is one run of the lock workload.
type LockScenario struct {
	Name string
	// Holders is the number of holder processes; Servers the quorum's
	// redis-servers.
	Holders, Servers int
	// Duration is how long the holders run.
	Duration time.Duration
	// TTL, ServerTimeout, DriftFactor and RestartQuarantine configure
	// the holders' quorum.
	TTL, ServerTimeout, RestartQuarantine time.Duration
	DriftFactor                           float64
	// WorkMin and WorkMax bound a holder's work under a lease; Stubborn is
	// the share of leases that write after their work's context ended.
	WorkMin, WorkMax time.Duration
	Stubborn         float64
	// Nemeses are drawn from, one fault at a time, each held for FaultFor;
	// the run is healthy for Calm between two.
	Nemeses        []string
	FaultFor, Calm time.Duration
}

// drift is the holders' documented drift allowance: TTL × DriftFactor + 2 ms.
func (sc LockScenario) drift() time.Duration {
	return time.Duration(float64(sc.TTL)*sc.DriftFactor) + 2*time.Millisecond
}

// allLockNemeses are the faults of the lock workload.
var allLockNemeses = []string{"holder-pause", "holder-partition", "holder-delay", "server-restart", "rolling-restart"}

// LockProfile returns the lock scenarios of a profile: "short" (CI, about
// half a minute) or "long" (before a release: more holders, a longer run).
func LockProfile(name string) []LockScenario {
	sc := LockScenario{Name: "lock-set", Holders: 3, Servers: 5, Duration: 15 * time.Second,
		TTL: time.Second, ServerTimeout: 100 * time.Millisecond, DriftFactor: 0.01,
		WorkMin: 10 * time.Millisecond, WorkMax: 1500 * time.Millisecond, Stubborn: 0.5,
		Nemeses: allLockNemeses, FaultFor: 1500 * time.Millisecond, Calm: 300 * time.Millisecond}
	if name == "long" {
		sc.Holders, sc.Duration = 5, 3*time.Minute
	}
	return []LockScenario{sc}
}

// LockWrite is one write that PostgreSQL accepted, in commit order.
type LockWrite struct {
	Seq, Fence int64
	Holder     string
	Elem       int64
}

// LockHistory is what a run of the lock workload recorded. Times are
// wall-clock Unix nanoseconds (every process runs on one host); Start is
// the run's.
type LockHistory struct {
	Scenario string
	Seed     int64
	Start    int64
	// Leases are the holders' reports: leases held and attempts failed.
	Leases []lockwire.Report
	// Log is the writes PostgreSQL accepted, in commit order; Final the
	// set at the end.
	Log   []LockWrite
	Final []int64
	// Events are the nemeses' actions (At is from Start).
	Events []Event
	// Pauses are, per holder, the windows it was stopped (SIGSTOP).
	Pauses map[string][][2]int64
}

func (h *LockHistory) at(t int64) string { return ms(time.Duration(t - h.Start)) }

// pausedDuring reports whether holder was paused at some time in [from, to].
func (h *LockHistory) pausedDuring(holder string, from, to int64) bool {
	for _, p := range h.Pauses[holder] {
		if p[0] <= to && p[1] >= from {
			return true
		}
	}
	return false
}

// SaveLock writes a failing lock run's history and violations under dir.
func SaveLock(dir string, h *LockHistory, vs []Violation) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644); err != nil {
		return err
	}
	var s strings.Builder
	for _, v := range vs {
		s.WriteString(v.String() + "\n\n")
	}
	s.WriteString("faults:\n")
	for _, e := range h.Events {
		fmt.Fprintf(&s, "  %s %s\n", ms(e.At), e.What)
	}
	return os.WriteFile(filepath.Join(dir, "violations.txt"), []byte(s.String()), 0o644)
}
