package robustness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/pgtest"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/robustness/lockreplica/lockwire"
)

var (
	lockBinOnce sync.Once
	lockBinPath string
	lockBinErr  error
)

// lockBin builds the holder program once per test binary, with the race
// detector when this test binary has it.
func lockBin(t *testing.T) string {
	lockBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "stampede-lockreplica-")
		if err != nil {
			lockBinErr = err
			return
		}
		lockBinPath = filepath.Join(dir, "lockreplica")
		args := []string{"build", "-o", lockBinPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "github.com/stampede-go/stampede/robustness/lockreplica")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			lockBinErr = fmt.Errorf("build lockreplica: %w: %s", err, out)
		}
	})
	if lockBinErr != nil {
		t.Fatal(lockBinErr)
	}
	return lockBinPath
}

// TestLockSet runs the lock workload's scenarios of the profile (see
// lock.go) and checks their histories. On a violation it saves the history
// and prints the seed that replays the run's fault schedule:
//
//	go test -C robustness . -run 'TestLockSet/NAME' -robustness.seed=SEED
func TestLockSet(t *testing.T) {
	if testing.Short() {
		t.Skip("the lock workload runs servers and holders for half a minute")
	}
	if _, err := redisserver.LookPath(""); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	pg := pgtest.Server(t)
	bin := lockBin(t)
	for _, sc := range LockProfile(*profile) {
		t.Run(sc.Name, func(t *testing.T) {
			s := *seed
			if s == 0 {
				s = time.Now().UnixNano()
			}
			h, err := RunLock(sc, s, bin, pg.Addr())
			if err != nil {
				t.Fatalf("seed %d: %v", s, err)
			}
			vs, st := CheckLock(sc, h)
			t.Logf("seed %d: %d attempts, %d leases, writes accepted %d (late %d), fenced out %d (late %d), errors %v, %d faults; "+
				"closest hand-over %s (drift allowance %s); %d violations",
				s, st.Attempts, st.Leases, st.Accepted, st.LateAccepted, st.Fenced, st.LateFenced, st.Errors, len(h.Events)/2,
				st.Closest, sc.drift(), len(vs))
			if len(vs) == 0 {
				return
			}
			dir := *outDir
			if dir == "" {
				dir = filepath.Join(os.TempDir(), "stampede-robustness")
			}
			dir = filepath.Join(dir, fmt.Sprintf("%s-%d", sc.Name, s))
			if err := SaveLock(dir, h, vs); err != nil {
				t.Log(err)
			}
			for i, v := range vs {
				if i == 10 {
					t.Errorf("... and %d more (all in %s)", len(vs)-10, dir)
					break
				}
				t.Error(v)
			}
			t.Errorf("replay: go test -C robustness . -run 'TestLockSet/%s$' -robustness.seed=%d; history in %s", sc.Name, s, dir)
		})
	}
}

// The lock checker is tested like the cache's: each property reports the
// history that breaks it and stays silent on its legal twin.

// lb builds a lock history on a clock of milliseconds from 0.
type lb struct{ h *LockHistory }

func newLB() *lb { return &lb{h: &LockHistory{Pauses: map[string][][2]int64{}}} }

func msAt(v int) int64 { return int64(v) * int64(time.Millisecond) }

// lease records a lease: invoked, acquired and ended at the given times
// (ms), its work's context cancelled at ctxEnd (0: never), and its write.
func (b *lb) lease(holder string, fence int64, inv, acq, end, ctxEnd int, write string, elem int64) {
	r := lockwire.Report{Holder: holder, Fence: fence, Invoke: msAt(inv), Acquired: msAt(acq), End: msAt(end), Claim: lockwire.OK, Write: write, Elem: elem}
	if ctxEnd > 0 {
		r.CtxEnd = msAt(ctxEnd)
	}
	b.h.Leases = append(b.h.Leases, r)
}

func (b *lb) accepted(fence int64, holder string, elem int64) {
	b.h.Log = append(b.h.Log, LockWrite{Seq: int64(len(b.h.Log) + 1), Fence: fence, Holder: holder, Elem: elem})
	b.h.Final = append(b.h.Final, elem)
}

var lockTestScenario = LockScenario{TTL: time.Second, DriftFactor: 0.01, ServerTimeout: 100 * time.Millisecond} // drift 12 ms

func TestLockChecker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *lb)
		want  string
	}{
		{"hand-over in order", func(b *lb) {
			b.lease("h0", 10, 0, 5, 1000, 990, lockwire.OK, 1)
			b.accepted(10, "h0", 1)
			b.lease("h1", 20, 100, 1005, 1100, 0, lockwire.OK, 2)
			b.accepted(20, "h1", 2)
		}, ""},
		{"overlap within the drift allowance", func(b *lb) {
			b.lease("h0", 10, 0, 5, 1000, 1010, lockwire.OK, 1)
			b.accepted(10, "h0", 1)
			b.lease("h1", 20, 100, 1000, 1100, 0, lockwire.OK, 2)
			b.accepted(20, "h1", 2)
		}, ""},
		{"overlap beyond the drift allowance", func(b *lb) {
			b.lease("h0", 10, 0, 5, 1100, 1080, lockwire.NotTried, 0)
			b.lease("h1", 20, 100, 1000, 1200, 0, lockwire.OK, 2)
			b.accepted(20, "h1", 2)
		}, "exclusion"},
		{"overlap of a paused holder, its late write fenced out", func(b *lb) {
			b.h.Pauses["h0"] = [][2]int64{{msAt(200), msAt(2000)}}
			b.lease("h0", 10, 0, 5, 2100, 2001, lockwire.Fenced, 1)
			b.lease("h1", 20, 100, 1005, 1200, 0, lockwire.OK, 2)
			b.accepted(20, "h1", 2)
		}, ""},
		{"a fence handed out twice", func(b *lb) {
			b.lease("h0", 10, 0, 5, 100, 0, lockwire.OK, 1)
			b.accepted(10, "h0", 1)
			b.lease("h1", 10, 200, 205, 300, 0, lockwire.Fenced, 2)
		}, "fence-unique,fences-rise"},
		{"a later lease with a lower fence", func(b *lb) {
			b.lease("h0", 20, 0, 5, 100, 0, lockwire.OK, 1)
			b.accepted(20, "h0", 1)
			b.lease("h1", 10, 200, 205, 300, 0, lockwire.Fenced, 2)
		}, "fences-rise"},
		{"an accepted write with a lower fence after a higher one", func(b *lb) {
			b.lease("h0", 10, 0, 5, 100, 0, lockwire.OK, 1)
			b.lease("h1", 20, 200, 205, 300, 0, lockwire.OK, 2)
			b.accepted(20, "h1", 2)
			b.accepted(10, "h0", 1)
		}, "fenced-writes-in-order"},
		{"an acknowledged element lost", func(b *lb) {
			b.lease("h0", 10, 0, 5, 100, 0, lockwire.OK, 1)
			b.lease("h1", 20, 200, 205, 300, 0, lockwire.OK, 2)
			b.h.Log = []LockWrite{{1, 10, "h0", 1}, {2, 20, "h1", 2}}
			b.h.Final = []int64{2} // h1 read the set before h0 wrote
		}, "no-lost-writes,no-lost-writes"},
		{"a refused write in the set", func(b *lb) {
			b.lease("h0", 10, 0, 5, 100, 0, lockwire.OK, 1)
			b.accepted(10, "h0", 1)
			b.lease("h1", 20, 200, 205, 300, 0, lockwire.Fenced, 2)
			b.h.Final = append(b.h.Final, 2)
		}, "no-lost-writes,no-lost-writes"},
		{"an undocumented error", func(b *lb) {
			b.lease("h0", 10, 0, 5, 100, 0, lockwire.OK, 1)
			b.accepted(10, "h0", 1)
			b.h.Leases = append(b.h.Leases, lockwire.Report{Holder: "h1", Invoke: msAt(50), End: msAt(60), Err: "boom", ErrKind: "other"})
		}, "documented-errors"},
		{"work begun within the validity", func(b *lb) {
			b.lease("h0", 10, 0, 5, 100, 0, lockwire.OK, 1)
			b.h.Leases[0].Until = msAt(1000)
			b.accepted(10, "h0", 1)
		}, ""},
		{"work begun after the validity", func(b *lb) {
			b.lease("h0", 10, 0, 1300, 1400, 1301, lockwire.NotTried, 0)
			b.h.Leases[0].Until = msAt(990)
			b.lease("h1", 20, 1500, 1505, 1600, 0, lockwire.OK, 2)
			b.accepted(20, "h1", 2)
		}, "work-within-validity"},
		{"work begun after the validity by a paused holder", func(b *lb) {
			b.h.Pauses["h0"] = [][2]int64{{msAt(100), msAt(1250)}}
			b.lease("h0", 10, 0, 1300, 1400, 1301, lockwire.NotTried, 0)
			b.h.Leases[0].Until = msAt(990)
			b.lease("h1", 20, 1500, 1505, 1600, 0, lockwire.OK, 2)
			b.accepted(20, "h1", 2)
		}, ""},
		{"an attempt that kept its deadline", func(b *lb) {
			b.lease("h0", 10, 0, 5, 100, 0, lockwire.OK, 1)
			b.accepted(10, "h0", 1)
			b.h.Leases = append(b.h.Leases, lockwire.Report{Holder: "h1", Invoke: msAt(50), Deadline: msAt(80), End: msAt(85), Err: "no quorum", ErrKind: "no-quorum"})
		}, ""},
		{"an attempt that outlived its deadline", func(b *lb) {
			b.lease("h0", 10, 0, 5, 100, 0, lockwire.OK, 1)
			b.accepted(10, "h0", 1)
			b.h.Leases = append(b.h.Leases, lockwire.Report{Holder: "h1", Invoke: msAt(50), Deadline: msAt(80), End: msAt(180), Err: "no quorum", ErrKind: "no-quorum"})
		}, "deadline-kept"},
		{"nothing accepted", func(b *lb) {
			b.lease("h0", 10, 0, 5, 100, 0, lockwire.Fenced, 1)
		}, "progress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newLB()
			tc.build(b)
			vs, _ := CheckLock(lockTestScenario, b.h)
			got := properties(vs)
			want := slices.Sorted(slices.Values(splitProps(tc.want)))
			if g := slices.Sorted(slices.Values(splitProps(got))); !slices.Equal(g, want) {
				t.Errorf("violations %q, want %q: %v", got, tc.want, vs)
			}
		})
	}
}

func splitProps(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' })
}
