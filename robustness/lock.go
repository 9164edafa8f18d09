package robustness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/lease"
	"github.com/stampede-go/stampede/robustness/lockreplica/lockwire"
	"github.com/stampede-go/stampede/robustness/lockreplica/pgwire"
)

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

// lockHolder is one holder process.
type lockHolder struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	done chan struct{}

	mu      sync.Mutex
	reports []lockwire.Report
	logs    bytes.Buffer
	paused  bool
	holding int64 // the fence of the lease it holds now, 0 if none
}

func startHolder(bin string, cfg lockwire.Config) (*lockHolder, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	h := &lockHolder{name: cfg.Holder, done: make(chan struct{})}
	h.cmd = exec.Command(bin, string(b))
	h.cmd.Stderr = &syncWriter{mu: &h.mu, w: &h.logs}
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if h.in, err = h.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start holder %s: %w", cfg.Holder, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r lockwire.Report
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue
			}
			h.mu.Lock()
			if r.Holding {
				h.holding = r.Fence
			} else {
				h.reports = append(h.reports, r)
				h.holding = 0
			}
			h.mu.Unlock()
		}
		_ = h.cmd.Wait()
		close(h.done)
	}()
	return h, nil
}

func (h *lockHolder) signal(sig syscall.Signal, paused bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.paused = paused
	return h.cmd.Process.Signal(sig)
}

// stop closes the holder's input (it gives up what it is doing, releases
// and exits), and kills it if it has not exited within grace.
func (h *lockHolder) stop(grace time.Duration) {
	h.mu.Lock()
	paused := h.paused
	h.mu.Unlock()
	if paused {
		_ = h.signal(syscall.SIGCONT, false)
	}
	_ = h.in.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-h.done:
	case <-t.C:
		_ = h.cmd.Process.Kill()
		<-h.done
	}
}

// lockRun is a run of the lock workload in progress.
type lockRun struct {
	sc      LockScenario
	rng     *rand.Rand
	hist    *LockHistory
	servers []*redisserver.Server
	proxies [][]*faultproxy.Proxy // [holder][server]
	holders []*lockHolder
}

func (r *lockRun) event(what string, heal bool) {
	r.hist.Events = append(r.hist.Events, Event{At: time.Duration(time.Now().UnixNano() - r.hist.Start), What: what, Heal: heal})
}

// RunLock runs sc with seed against PostgreSQL at pgAddr (user and database
// "postgres", trust authentication) and returns its history. It starts the
// quorum's redis-servers, the fault proxies and the holders (bin is the
// lockreplica program), and stops them before it returns.
func RunLock(sc LockScenario, seed int64, bin, pgAddr string) (h *LockHistory, err error) {
	r := &lockRun{sc: sc, rng: rand.New(rand.NewPCG(uint64(seed), 0x10c4)),
		hist: &LockHistory{Scenario: sc.Name, Seed: seed, Start: time.Now().UnixNano(), Pauses: map[string][][2]int64{}}}
	if err := pgExec(pgAddr, `DROP TABLE IF EXISTS lockset, writes;
		CREATE TABLE lockset (id int PRIMARY KEY, fence bigint NOT NULL, elems bigint[] NOT NULL);
		INSERT INTO lockset VALUES (1, 0, '{}');
		CREATE TABLE writes (seq bigserial PRIMARY KEY, fence bigint NOT NULL, holder text NOT NULL, elem bigint NOT NULL)`); err != nil {
		return nil, fmt.Errorf("set up PostgreSQL: %w", err)
	}
	if r.servers, err = redisserver.StartIndependent(sc.Servers, redisserver.Options{}); err != nil {
		return nil, err
	}
	defer func() {
		for _, s := range r.servers {
			_ = s.Close()
		}
	}()
	name := fmt.Sprintf("lockset-%d", seed)
	if err := r.warmUp(name); err != nil {
		return nil, err
	}
	defer func() {
		for _, ps := range r.proxies {
			for _, p := range ps {
				_ = p.Close()
			}
		}
	}()
	for i := range sc.Holders {
		var ps []*faultproxy.Proxy
		var addrs []string
		for _, s := range r.servers {
			p, err := faultproxy.New(s.Addr())
			if err != nil {
				return nil, err
			}
			ps, addrs = append(ps, p), append(addrs, p.Addr())
		}
		r.proxies = append(r.proxies, ps)
		hd, err := startHolder(bin, lockwire.Config{Holder: fmt.Sprintf("h%d", i), Servers: addrs, PG: pgAddr, Name: name,
			TTL: sc.TTL, ServerTimeout: sc.ServerTimeout, RestartQuarantine: sc.RestartQuarantine, DriftFactor: sc.DriftFactor,
			WorkMin: sc.WorkMin, WorkMax: sc.WorkMax, Stubborn: sc.Stubborn, Seed: seed + int64(i)})
		if err != nil {
			return nil, err
		}
		r.holders = append(r.holders, hd)
	}
	stopped := false
	stopHolders := func() {
		if stopped {
			return
		}
		stopped = true
		var wg sync.WaitGroup
		for _, hd := range r.holders {
			wg.Go(func() { hd.stop(5 * time.Second) })
		}
		wg.Wait()
	}
	defer stopHolders()

	end := time.Now().Add(sc.Duration)
	for time.Now().Before(end) && len(sc.Nemeses) > 0 {
		time.Sleep(sc.Calm) // the run's pace, not a synchronisation
		if err := r.fault(sc.Nemeses[r.rng.IntN(len(sc.Nemeses))]); err != nil {
			return nil, err
		}
	}
	if len(sc.Nemeses) == 0 {
		time.Sleep(time.Until(end))
	}
	stopHolders()
	for _, hd := range r.holders {
		hd.mu.Lock()
		r.hist.Leases = append(r.hist.Leases, hd.reports...)
		logs := hd.logs.String()
		hd.mu.Unlock()
		if strings.Contains(logs, "DATA RACE") || strings.Contains(logs, "panic:") {
			return r.hist, fmt.Errorf("holder %s: %s", hd.name, logs)
		}
	}
	sort.Slice(r.hist.Leases, func(i, j int) bool { return r.hist.Leases[i].Invoke < r.hist.Leases[j].Invoke })
	if err := r.dump(pgAddr); err != nil {
		return r.hist, err
	}
	return r.hist, nil
}

// warmUp takes the lease on name once on every server and releases it, so
// that every server knows the name: a restarted server is then told apart
// from a new one (lease/doc.go leaves out a name's first lease, granted
// without the servers a later holder reaches).
func (r *lockRun) warmUp(name string) error {
	clients := make([]redis.Scripter, len(r.servers))
	for i, s := range r.servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
		defer c.Close()
		clients[i] = c
	}
	q, err := lease.NewQuorum(clients, lease.QuorumOptions{ServerTimeout: time.Second})
	if err != nil {
		return err
	}
	ctx := context.Background()
	l, err := q.Acquire(ctx, name, r.sc.TTL)
	if err != nil {
		return fmt.Errorf("warm-up lease: %w", err)
	}
	return l.Release(ctx)
}

// target picks the holder a fault aims at: the one that holds the lease
// now, most of the time, or any.
func (r *lockRun) target() int {
	if r.rng.IntN(4) > 0 {
		for i, hd := range r.holders {
			hd.mu.Lock()
			holding := hd.holding != 0
			hd.mu.Unlock()
			if holding {
				return i
			}
		}
	}
	return r.rng.IntN(len(r.holders))
}

// fault injects one fault of the named nemesis, holds it and heals it.
func (r *lockRun) fault(nemesis string) error {
	sc, rng := r.sc, r.rng
	switch nemesis {
	case "holder-pause":
		// Past the lease's TTL: another holder takes the lease over, and
		// this one's writes, when it resumes, must be fenced out.
		hd := r.holders[r.target()]
		d := sc.TTL + time.Duration(rng.Int64N(int64(sc.TTL)))
		from := time.Now().UnixNano()
		r.event(fmt.Sprintf("pause %s for %s", hd.name, d), false)
		if err := hd.signal(syscall.SIGSTOP, true); err != nil {
			return err
		}
		time.Sleep(d)
		if err := hd.signal(syscall.SIGCONT, false); err != nil {
			return err
		}
		r.hist.Pauses[hd.name] = append(r.hist.Pauses[hd.name], [2]int64{from, time.Now().UnixNano()})
		r.event("resume "+hd.name, true)
	case "holder-partition":
		// Two servers (the holder keeps a majority) or three (it does not).
		i := r.target()
		idx := rng.Perm(len(r.servers))[:2+rng.IntN(2)]
		r.event(fmt.Sprintf("cut h%d off from servers %v", i, idx), false)
		for _, s := range idx {
			r.proxies[i][s].SetPartition(true)
		}
		time.Sleep(sc.FaultFor)
		for _, s := range idx {
			r.proxies[i][s].SetPartition(false)
		}
		r.event(fmt.Sprintf("heal h%d", i), true)
	case "holder-delay":
		// Each message of the holder delayed by up to twice the server
		// timeout: grants, releases and extensions arrive after their
		// attempt gave up.
		i := r.target()
		d := sc.ServerTimeout/2 + time.Duration(rng.Int64N(int64(sc.ServerTimeout)*3/2))
		idx := rng.Perm(len(r.servers))[:1+rng.IntN(len(r.servers))]
		r.event(fmt.Sprintf("delay h%d by %s to servers %v", i, d, idx), false)
		for _, s := range idx {
			r.proxies[i][s].SetLatency(d)
		}
		time.Sleep(sc.FaultFor)
		for _, s := range idx {
			r.proxies[i][s].SetLatency(0)
		}
		r.event(fmt.Sprintf("no delay h%d", i), true)
	case "server-restart":
		// One or two servers killed (SIGKILL, no persistence) and back
		// empty on the same port.
		idx := rng.Perm(len(r.servers))[:1+rng.IntN(2)]
		r.event(fmt.Sprintf("kill servers %v", idx), false)
		for _, s := range idx {
			if err := r.servers[s].Stop(); err != nil {
				return err
			}
		}
		time.Sleep(sc.FaultFor / 3)
		for _, s := range idx {
			if err := r.servers[s].Restart(); err != nil {
				return err
			}
		}
		r.event(fmt.Sprintf("servers %v back, empty", idx), true)
	case "rolling-restart":
		// Three servers restarted one after another within a TTL, as a
		// careless rolling upgrade: the lease held on five is left on two
		// servers that kept it, and the restarted three must not make a
		// majority for another holder while it is valid.
		idx := rng.Perm(len(r.servers))[:3]
		r.event(fmt.Sprintf("rolling restart of servers %v", idx), false)
		for _, s := range idx {
			if err := r.servers[s].Restart(); err != nil {
				return err
			}
			time.Sleep(sc.TTL / 5)
		}
		r.event("rolling restart done", true)
	default:
		return fmt.Errorf("unknown lock nemesis %q", nemesis)
	}
	return nil
}

// dump reads the accepted writes and the final set from PostgreSQL.
func (r *lockRun) dump(pgAddr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := pgwire.Connect(ctx, pgAddr, "postgres", "postgres")
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := db.Query(ctx, `SELECT seq, fence, holder, elem FROM writes ORDER BY seq`)
	if err != nil {
		return err
	}
	for _, row := range res.Rows {
		var w LockWrite
		w.Seq, _ = strconv.ParseInt(*row[0], 10, 64)
		w.Fence, _ = strconv.ParseInt(*row[1], 10, 64)
		w.Holder = *row[2]
		w.Elem, _ = strconv.ParseInt(*row[3], 10, 64)
		r.hist.Log = append(r.hist.Log, w)
	}
	res, err = db.Query(ctx, `SELECT array_to_string(elems, ',') FROM lockset WHERE id = 1`)
	if err != nil {
		return err
	}
	if len(res.Rows) != 1 || res.Rows[0][0] == nil {
		return errors.New("lockset row missing")
	}
	if s := *res.Rows[0][0]; s != "" {
		for f := range strings.SplitSeq(s, ",") {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return err
			}
			r.hist.Final = append(r.hist.Final, v)
		}
	}
	return nil
}

// pgExec runs sql on a connection of its own.
func pgExec(addr, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := pgwire.Connect(ctx, addr, "postgres", "postgres")
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Query(ctx, sql)
	return err
}

// LockStats are a lock run's figures, for the log.
type LockStats struct {
	Leases, Attempts, Accepted, Fenced, LateFenced, LateAccepted int
	// Closest is the least time between one lease's work ending and the
	// next holder's work beginning (negative: an overlap), among holders
	// that were not paused.
	Closest time.Duration
	Errors  map[string]int
}

// workEnd is when a lease's work stopped being covered by the lease: when
// its context was cancelled, or when the work returned, whichever came
// first.
func workEnd(r lockwire.Report) int64 {
	if r.CtxEnd != 0 && r.CtxEnd < r.End {
		return r.CtxEnd
	}
	return r.End
}

// pausedDuring reports whether holder was paused at some time in [from, to].
func (h *LockHistory) pausedDuring(holder string, from, to int64) bool {
	for _, p := range h.Pauses[holder] {
		if p[0] <= to && p[1] >= from {
			return true
		}
	}
	return false
}

// CheckLock holds a lock run's history to the lease package's promises and
// returns what it broke, with its figures.
func CheckLock(sc LockScenario, h *LockHistory) ([]Violation, LockStats) {
	var vs []Violation
	add := func(prop, format string, args ...any) {
		vs = append(vs, Violation{Property: prop, Detail: fmt.Sprintf(format, args...)})
	}
	st := LockStats{Errors: map[string]int{}, Closest: time.Duration(1 << 62)}
	var held []lockwire.Report
	for _, r := range h.Leases {
		st.Attempts++
		if r.ErrKind != "" {
			st.Errors[r.ErrKind]++
		}
		if r.ErrKind == "other" {
			add("documented-errors", "%s at %s: %s", r.Holder, h.at(r.Invoke), r.Err)
		}
		if r.Held() {
			held = append(held, r)
		}
	}
	st.Leases = len(held)
	sort.Slice(held, func(i, j int) bool { return held[i].Acquired < held[j].Acquired })

	// A fence is handed out once, and above every fence handed out before
	// the attempt that got it began.
	byFence := map[int64]lockwire.Report{}
	for _, r := range held {
		if o, ok := byFence[r.Fence]; ok {
			add("fence-unique", "fence %d handed to %s at %s and to %s at %s", r.Fence, o.Holder, h.at(o.Acquired), r.Holder, h.at(r.Acquired))
		}
		byFence[r.Fence] = r
	}
	for i, x := range held {
		for _, y := range held[i+1:] {
			if x.Acquired < y.Invoke && x.Fence >= y.Fence {
				add("fences-rise", "%s got fence %d at %s; %s, who began trying at %s, got %d", x.Holder, x.Fence, h.at(x.Acquired), y.Holder, h.at(y.Invoke), y.Fence)
			}
		}
	}

	// No two leases' work overlapping beyond the drift allowance, unless
	// the earlier holder was paused during its work (its writes are then
	// the fence's to stop, checked below).
	for i, x := range held {
		xEnd := workEnd(x)
		paused := h.pausedDuring(x.Holder, x.Acquired, xEnd)
		for _, y := range held[i+1:] {
			if y.Holder == x.Holder {
				continue
			}
			gap := time.Duration(y.Acquired - xEnd)
			if !paused && gap < st.Closest && x.Fence < y.Fence {
				st.Closest = gap
			}
			if !paused && -gap > sc.drift() {
				add("exclusion", "%s's work under fence %d (from %s) ended at %s, %s after %s took the lease with fence %d at %s (drift allowance %s)",
					x.Holder, x.Fence, h.at(x.Acquired), h.at(xEnd), -gap, y.Holder, y.Fence, h.at(y.Acquired), sc.drift())
			}
		}
	}

	// The writes PostgreSQL accepted have strictly increasing fences in
	// commit order, and the set holds exactly their elements.
	accepted := map[int64]LockWrite{}
	for i, w := range h.Log {
		if i > 0 && w.Fence <= h.Log[i-1].Fence {
			add("fenced-writes-in-order", "write %d (%s, fence %d) accepted after write %d (%s, fence %d)", w.Seq, w.Holder, w.Fence, h.Log[i-1].Seq, h.Log[i-1].Holder, h.Log[i-1].Fence)
		}
		accepted[w.Elem] = w
	}
	final := map[int64]bool{}
	for _, e := range h.Final {
		if final[e] {
			add("no-lost-writes", "element %d twice in the set", e)
		}
		final[e] = true
		if _, ok := accepted[e]; !ok {
			add("no-lost-writes", "element %d in the set, but no accepted write of it", e)
		}
	}
	for e, w := range accepted {
		if !final[e] {
			add("no-lost-writes", "element %d, accepted with fence %d (write %d by %s), lost from the set", e, w.Fence, w.Seq, w.Holder)
		}
	}
	for _, r := range held {
		switch r.Write {
		case lockwire.OK:
			st.Accepted++
			if r.Late {
				st.LateAccepted++
			}
			if !final[r.Elem] {
				add("no-lost-writes", "%s's write of %d under fence %d was acknowledged but is not in the set", r.Holder, r.Elem, r.Fence)
			}
		case lockwire.Fenced:
			st.Fenced++
			if r.Late {
				st.LateFenced++
			}
			if final[r.Elem] {
				add("no-lost-writes", "%s's write of %d under fence %d was refused but is in the set", r.Holder, r.Elem, r.Fence)
			}
		}
	}
	if st.Accepted == 0 {
		add("progress", "no write was accepted in %d attempts: the run proves nothing", st.Attempts)
	}
	return vs, st
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
