package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/examples/internal/exampletest"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { exampletest.Main(m, main) }

// wantNightly is what the program prints of the lease on one Redis.
const wantNightly = `nightly report: ran, fence above the last one: true
nightly report: ran, fence above the last one: true
nightly report: not run while another holds the lease: true
`

// checkCleanup checks the election's lines: the job ran on the leader
// the number of times asked, start to start at least the interval apart
// (as printed, to a tenth of it), and never on the other candidate.
func checkCleanup(t *testing.T, lines []string, interval time.Duration) {
	t.Helper()
	if len(lines) != 4 || lines[0] != "cleanup: run 1" || lines[3] != "cleanup: the other replica ran it 0 times" {
		t.Fatalf("the election's lines:\n%s\nwant 3 runs, then none by the other replica", strings.Join(lines, "\n"))
	}
	for i, line := range lines[1:3] {
		var run int
		var gap string
		if _, err := fmt.Sscanf(line, "cleanup: run %d, %s after the last one started", &run, &gap); err != nil || run != i+2 {
			t.Fatalf("line %q: %v", line, err)
		}
		if d, err := time.ParseDuration(gap); err != nil || d < interval {
			t.Errorf("run %d started %s after the one before, want at least %s", run, gap, interval)
		}
	}
}

// TestLeasesAndElectionAsThePageSays runs the page's program against real
// redis-servers and holds what docs/locks.md says: Using runs fn under a
// fence that rises with every acquisition and does not run it while
// another holder has the lease (ErrLeaseBusy); a quorum lease is granted by
// a majority of masters, and refused with ErrNoQuorum, naming each failed
// server and its refused connection, when a majority is down; RunEvery runs
// the job on the leader, start to start at least the interval apart, and
// never on the other candidate meanwhile.
func TestLeasesAndElectionAsThePageSays(t *testing.T) {
	servers, _ := redistest.Independent(t, 3)
	var live []string
	for _, s := range servers {
		live = append(live, s.Addr())
	}
	down := []string{redistest.RefusingAddr(t), redistest.RefusingAddr(t)}
	const interval = 100 * time.Millisecond
	args := []string{"-redis", redistest.Addr(t), "-every", interval.String()}

	t.Run("majority up", func(t *testing.T) {
		masters := live // 3 of 3
		lines := exampletest.Lines(exampletest.Run(t, append(args, "-quorum", strings.Join(masters, ","))...))
		if len(lines) != 8 || strings.Join(lines[:3], "\n")+"\n" != wantNightly || lines[3] != "billing: leased on a majority of 3 masters" {
			t.Fatalf("the program printed\n%s\nwant\n%sbilling: leased on a majority of 3 masters\n(the election's lines)", strings.Join(lines, "\n"), wantNightly)
		}
		checkCleanup(t, lines[4:], interval)
	})
	t.Run("majority down", func(t *testing.T) {
		masters := append([]string{live[0]}, down...) // 1 of 3
		lines := exampletest.Lines(exampletest.Run(t, append(args, "-quorum", strings.Join(masters, ","))...))
		// billing's two lines, then its error's: one per failed server.
		if len(lines) != 10 || strings.Join(lines[:3], "\n")+"\n" != wantNightly || lines[3] != "billing: no lease; no quorum: true" {
			t.Fatalf("the program printed\n%s\nwant\n%sbilling: no lease; no quorum: true\n(the error, one line per failed server)\n(the election's lines)", strings.Join(lines, "\n"), wantNightly)
		}
		failures := strings.Join(lines[4:6], "\n")
		for i, addr := range down {
			if !strings.Contains(failures, addr) {
				t.Errorf("billing's error does not name the failed server %s:\n%s", addr, failures)
			}
			// A refused connection is named as such, not as a timeout
			// (it costs the round nothing; docs/locks.md).
			if !strings.Contains(lines[4+i], "connection refused") {
				t.Errorf("billing's error for a refused server does not say so: %s", lines[4+i])
			}
		}
		checkCleanup(t, lines[6:], interval)
	})
}
