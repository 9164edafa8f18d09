package robustness

// The lock workload is Jepsen's lock-set over the lease package's quorum:
// holder processes (lockreplica/) take a lease on one name from five
// independent redis-servers, each through fault proxies of its own, and
// under it read a set from a PostgreSQL row and write it back with an
// element added, claiming the row with the lease's fence first and writing
// only where no higher fence claimed it since. Some holders shorten their
// own lease inside the work (Extend to a tenth of the TTL), and some
// attempts have a deadline of their own. Nemeses pause a holder (SIGSTOP)
// past its lease, cut a holder off from some servers, delay its messages,
// and kill servers and restart them empty, one at a time or as a rolling
// restart. A second scenario takes the leases from one Redis with a
// lease.Client whose RedisTimeout is past the TTL, under a nemesis that
// slows every holder's messages by more than a TTL, so that grants answer
// after their validity. CheckLock then holds the history to the lease
// package's promises: no lease's work begun after its validity ended, an
// attempt that took no lease returned by its own deadline, no two holders'
// work overlapping beyond the drift allowance unless the earlier one was
// paused (then only the fence protects, and the checks on the writes say
// whether it did), fences unique and rising with the order of acquisition,
// the accepted writes' fences strictly increasing in commit order, no
// acknowledged element lost, and no error but the documented ones.
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
	// Single makes the holders take their leases from the first server
	// alone, with a lease.Client (ServerTimeout is its RedisTimeout).
	Single bool
	// Shorten is the share of leases whose work extends the lease to a
	// tenth of its TTL first; Deadline the share of attempts made under a
	// context with a deadline within ServerTimeout (lockwire.Config).
	Shorten, Deadline float64
	// Nemeses are drawn from, one fault at a time, each held for FaultFor;
	// the run is healthy for Calm between two.
	Nemeses        []string
	FaultFor, Calm time.Duration
	// Opening, when set, is the run's first fault, whatever the draw.
	Opening string
}

// drift is the holders' documented drift allowance: TTL × DriftFactor + 2 ms.
func (sc LockScenario) drift() time.Duration {
	return time.Duration(float64(sc.TTL)*sc.DriftFactor) + 2*time.Millisecond
}

// allLockNemeses are the faults of the lock workload over a quorum.
var allLockNemeses = []string{"holder-pause", "holder-partition", "holder-split", "holder-delay", "server-restart", "rolling-restart"}

// singleLockNemeses are those over one Redis, which promises nothing when
// it restarts without its data: redis-slow delays every holder's messages
// so that a grant's reply comes after the lease's TTL, within RedisTimeout.
var singleLockNemeses = []string{"holder-pause", "holder-partition", "redis-slow"}

// LockProfile returns the lock scenarios of a profile: "short" (CI, about
// half a minute) or "long" (before a release: more holders, a longer run).
// In both, some holders shorten their own lease inside the work and some
// attempts have a deadline of their own.
func LockProfile(name string) []LockScenario {
	sc := LockScenario{Name: "lock-set", Holders: 3, Servers: 5, Duration: 15 * time.Second,
		TTL: time.Second, ServerTimeout: 100 * time.Millisecond, DriftFactor: 0.01,
		WorkMin: 10 * time.Millisecond, WorkMax: 1500 * time.Millisecond, Stubborn: 0.5,
		Shorten: 0.2, Deadline: 0.2,
		Nemeses: allLockNemeses, FaultFor: 1500 * time.Millisecond, Calm: 300 * time.Millisecond,
		Opening: "holder-split"}
	// One Redis and a lease.Client, its RedisTimeout past the TTL, so
	// that a grant can answer after the lease's validity.
	single := LockScenario{Name: "lock-set-single", Holders: 3, Servers: 1, Duration: 8 * time.Second,
		TTL: time.Second, ServerTimeout: 5 * time.Second, DriftFactor: 0.01,
		WorkMin: 10 * time.Millisecond, WorkMax: 1500 * time.Millisecond, Stubborn: 0.5,
		Single: true, Shorten: 0.2, Deadline: 0.2,
		Nemeses: singleLockNemeses, FaultFor: 1500 * time.Millisecond, Calm: 300 * time.Millisecond}
	if name == "long" {
		sc.Holders, sc.Duration = 5, 3*time.Minute
		single.Holders, single.Duration = 5, time.Minute
	}
	return []LockScenario{sc, single}
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
