package robustness

// A run of the lock workload: the quorum's redis-servers, each holder's
// fault proxies and the holders started, the nemeses injected and healed
// one at a time, and PostgreSQL's writes and final set read back into the
// history.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
			WorkMin: sc.WorkMin, WorkMax: sc.WorkMax, Stubborn: sc.Stubborn, Seed: seed + int64(i),
			Single: sc.Single, Shorten: sc.Shorten, Deadline: sc.Deadline})
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
	for i := 0; time.Now().Before(end) && len(sc.Nemeses) > 0; i++ {
		time.Sleep(sc.Calm) // the run's pace, not a synchronisation
		nemesis := sc.Nemeses[r.rng.IntN(len(sc.Nemeses))]
		if i == 0 && sc.Opening != "" {
			nemesis = sc.Opening
		}
		if err := r.fault(nemesis); err != nil {
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
		// Two servers (the holder keeps a majority) or three (it does not);
		// the only one, over one Redis.
		i := r.target()
		idx := rng.Perm(len(r.servers))[:min(2+rng.IntN(2), len(r.servers))]
		r.event(fmt.Sprintf("cut h%d off from servers %v", i, idx), false)
		for _, s := range idx {
			r.proxies[i][s].SetPartition(true)
		}
		time.Sleep(sc.FaultFor)
		for _, s := range idx {
			r.proxies[i][s].SetPartition(false)
		}
		r.event(fmt.Sprintf("heal h%d", i), true)
	case "holder-split":
		if len(r.holders) < 2 || len(r.servers) < 3 {
			return r.fault("holder-partition")
		}
		// The network split in two: one holder reaches a majority of the
		// servers only, another the rest only. Each side's holder keeps
		// trying; only the majority's may take the lease (a quorum counted
		// short grants the minority's too: two holders at once).
		i := r.target()
		j := (i + 1 + rng.IntN(len(r.holders)-1)) % len(r.holders)
		perm := rng.Perm(len(r.servers))
		majority, minority := perm[:len(perm)/2+1], perm[len(perm)/2+1:]
		r.event(fmt.Sprintf("split: h%d reaches servers %v only, h%d servers %v only", i, majority, j, minority), false)
		for _, s := range minority {
			r.proxies[i][s].SetPartition(true)
		}
		for _, s := range majority {
			r.proxies[j][s].SetPartition(true)
		}
		time.Sleep(sc.FaultFor)
		for _, s := range perm {
			r.proxies[i][s].SetPartition(false)
			r.proxies[j][s].SetPartition(false)
		}
		r.event(fmt.Sprintf("heal h%d and h%d", i, j), true)
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
	case "redis-slow":
		// Every holder's messages delayed by a TTL to one and a half:
		// whoever wins a grant gets its reply after the lease's validity
		// ended, within a RedisTimeout longer than that.
		d := sc.TTL + time.Duration(rng.Int64N(int64(sc.TTL/2)))
		r.event(fmt.Sprintf("slow every holder by %s", d), false)
		for _, ps := range r.proxies {
			for _, p := range ps {
				p.SetLatency(d)
			}
		}
		time.Sleep(sc.FaultFor)
		for _, ps := range r.proxies {
			for _, p := range ps {
				p.SetLatency(0)
			}
		}
		r.event("no slowness", true)
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
