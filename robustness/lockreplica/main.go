// Command lockreplica is one holder of the robustness suite's lock
// workload, Jepsen's lock-set: in a loop until its standard input closes,
// it takes a quorum lease (lease.Quorum over its own fault proxies to
// independent redis-servers; a lease.Client over the first one when the
// configuration says Single), raises the fence of a row in PostgreSQL to
// its lease's and reads the set the row holds, works a while, and writes
// the set back with its element added, only if no higher fence claimed the
// row since. It reports every lease, with its times, to its standard
// output (lockwire.Report, one JSON object a line), so that the suite can
// pause it (SIGSTOP) mid-lease and check that no two holders' work
// overlapped and that the fences ordered the writes.
//
// Usage: lockreplica CONFIG_JSON (a lockwire.Config). It is built and
// started by the robustness package's tests, not by hand.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/lease"
	"github.com/stampede-go/stampede/robustness/lockreplica/lockwire"
	"github.com/stampede-go/stampede/robustness/lockreplica/pgwire"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lockreplica:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 2 {
		return errors.New("usage: lockreplica CONFIG_JSON")
	}
	var cfg lockwire.Config
	if err := json.Unmarshal([]byte(os.Args[1]), &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	clients := make([]redis.Scripter, len(cfg.Servers))
	for i, a := range cfg.Servers {
		opts := &redis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second}
		if cfg.Single {
			// Connections dialled ahead: a slowed link then delays the
			// grant itself, not a handshake that runs out of RedisTimeout.
			opts.MinIdleConns = 2
		}
		c := redis.NewClient(opts)
		defer c.Close()
		clients[i] = c
	}
	retry := lease.Options{Retries: 1000, RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond}
	var q locker
	if cfg.Single {
		retry.RedisTimeout = cfg.ServerTimeout
		c, err := lease.New(clients[0], retry)
		if err != nil {
			return err
		}
		q = c
	} else {
		qq, err := lease.NewQuorum(clients, lease.QuorumOptions{
			Options:       retry,
			DriftFactor:   cfg.DriftFactor,
			ServerTimeout: cfg.ServerTimeout, RestartQuarantine: cfg.RestartQuarantine,
		})
		if err != nil {
			return err
		}
		q = qq
	}
	h := &holder{cfg: cfg, q: q, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x10c4)), out: json.NewEncoder(os.Stdout)}
	defer h.closeDB()

	// The suite closes our input to stop us: an attempt in progress gives
	// up, work in progress ends (its context is cancelled) and is released.
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
		}
		stop()
	}()
	for ctx.Err() == nil {
		h.once(ctx)
		select { // think time between leases
		case <-ctx.Done():
		case <-time.After(time.Duration(h.rng.IntN(20)) * time.Millisecond):
		}
	}
	return nil
}

// locker is a lease.Client or a lease.Quorum.
type locker interface {
	Using(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, l *lease.Lease) error) error
}

type holder struct {
	cfg  lockwire.Config
	q    locker
	rng  *rand.Rand
	out  *json.Encoder
	db   *pgwire.Conn
	elem int64
}

func now() int64 { return time.Now().UnixNano() }

func (h *holder) report(r lockwire.Report) {
	r.Holder = h.cfg.Holder
	if err := h.out.Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "lockreplica: report:", err)
		os.Exit(1)
	}
}

// once takes the lease, does the work under it and reports.
func (h *holder) once(stopping context.Context) {
	r := lockwire.Report{Invoke: now()}
	ctx := stopping
	if h.cfg.Deadline > 0 && h.rng.Float64() < h.cfg.Deadline {
		// A caller with a deadline: Using must return by it when it
		// takes no lease (and the work's context ends at it when it does).
		st := h.cfg.ServerTimeout
		d := st/4 + time.Duration(h.rng.Int64N(int64(st-st/4)+1))
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(stopping, d)
		defer cancel()
		dl, _ := ctx.Deadline()
		r.Deadline = dl.UnixNano()
	}
	err := h.q.Using(ctx, h.cfg.Name, h.cfg.TTL, func(ctx context.Context, l *lease.Lease) error {
		r.Acquired, r.Fence, r.Until = now(), l.Fence(), l.Until().UnixNano()
		h.report(lockwire.Report{Holding: true, Fence: r.Fence, Acquired: r.Acquired})
		// When the work's context is cancelled, on the holder's clock.
		var ctxEnd atomic.Int64
		ended := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			ctxEnd.Store(now())
			close(ended)
		})
		h.work(ctx, l, &r)
		r.End = now()
		if ctx.Err() != nil {
			<-ended // the AfterFunc runs as soon as the context is done
			r.CtxEnd = ctxEnd.Load()
		} else {
			stop()
		}
		return nil
	})
	if err != nil {
		r.Err, r.ErrKind = err.Error(), kind(err)
		switch {
		case stopping.Err() != nil && errors.Is(err, context.Canceled):
			r.ErrKind = "stopped" // the suite stopped us mid-attempt
		case r.ErrKind == "other" && r.Deadline != 0 && errors.Is(err, context.DeadlineExceeded):
			r.ErrKind = "deadline" // our own deadline passed
		}
	}
	if r.End == 0 {
		r.End = now()
	}
	h.report(r)
}

// work claims the row with the lease's fence, reading the set; works; and
// writes the set back with its element added, where the fence still holds.
// The claim and the write run under contexts of their own: a holder that
// was paused past its lease still sends them, and the fence must stop them.
func (h *holder) work(ctx context.Context, l *lease.Lease, r *lockwire.Report) {
	elems, claim, detail := h.claim(l.Fence())
	r.Claim, r.Detail = claim, detail
	if claim != lockwire.OK {
		return
	}
	if h.cfg.Shorten > 0 && h.rng.Float64() < h.cfg.Shorten {
		// The holder shortens its own lease: the work's context must end
		// at the new deadline, not at Using's next extension.
		err := l.Extend(ctx, h.cfg.TTL/10)
		r.Shortened, r.ShortUntil = true, l.Until().UnixNano()
		if err != nil && r.Detail == "" {
			r.Detail = "shorten: " + err.Error()
		}
	}
	d := h.cfg.WorkMin + time.Duration(h.rng.Int64N(int64(h.cfg.WorkMax-h.cfg.WorkMin)+1))
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
	r.Late = ctx.Err() != nil
	if r.Late && h.rng.Float64() >= h.cfg.Stubborn {
		r.Write = lockwire.NotTried // a holder that stops when told to
		return
	}
	h.elem++
	r.Elem = h.elemID(h.elem)
	r.WriteAt = now()
	r.Write, r.Detail = h.write(l.Fence(), elems, r.Elem)
	r.WriteDone = now()
}

// elemID makes the holder's n-th element unique across holders.
func (h *holder) elemID(n int64) int64 {
	i, _ := strconv.Atoi(strings.TrimPrefix(h.cfg.Holder, "h"))
	return int64(i+1)*1_000_000 + n
}

// claim raises the row's fence to fence, if it is below, and reads the set.
func (h *holder) claim(fence int64) (elems []int64, outcome, detail string) {
	res, err := h.query(fmt.Sprintf(`UPDATE lockset SET fence = %d WHERE id = 1 AND fence < %d RETURNING array_to_string(elems, ',')`, fence, fence))
	if err != nil {
		return nil, lockwire.Unknown, err.Error()
	}
	if len(res.Rows) == 0 {
		return nil, lockwire.Fenced, ""
	}
	if s := res.Rows[0][0]; s != nil && *s != "" {
		for f := range strings.SplitSeq(*s, ",") {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, lockwire.Unknown, err.Error()
			}
			elems = append(elems, v)
		}
	}
	return elems, lockwire.OK, ""
}

// write stores the set it read with elem added, where the row's fence is
// still ours, and logs the write in the same statement (the log's order is
// the commit order: every write takes the row's lock first). Writing the
// whole set back, rather than appending in SQL, is what makes two holders
// at once lose an element.
func (h *holder) write(fence int64, read []int64, elem int64) (outcome, detail string) {
	set := make([]string, 0, len(read)+1)
	for _, e := range append(read, elem) {
		set = append(set, strconv.FormatInt(e, 10))
	}
	res, err := h.query(fmt.Sprintf(`WITH w AS (UPDATE lockset SET elems = '{%s}' WHERE id = 1 AND fence = %d RETURNING 1)
		INSERT INTO writes (fence, holder, elem) SELECT %d, '%s', %d FROM w RETURNING seq`,
		strings.Join(set, ","), fence, fence, h.cfg.Holder, elem))
	switch {
	case err != nil:
		return lockwire.Unknown, err.Error()
	case len(res.Rows) == 0:
		return lockwire.Fenced, ""
	}
	return lockwire.OK, ""
}

var dbMu sync.Mutex // one statement at a time on the holder's connection

// query runs sql on the holder's connection, (re)connecting as needed,
// within a second.
func (h *holder) query(sql string) (*pgwire.Result, error) {
	dbMu.Lock()
	defer dbMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if h.db == nil {
		db, err := pgwire.Connect(ctx, h.cfg.PG, "postgres", "postgres")
		if err != nil {
			return nil, err
		}
		h.db = db
	}
	res, err := h.db.Query(ctx, sql)
	var pgErr *pgwire.Error
	if err != nil && !errors.As(err, &pgErr) {
		_ = h.db.Close() // broken on the way: a new connection next time
		h.db = nil
	}
	return res, err
}

func (h *holder) closeDB() {
	if h.db != nil {
		_ = h.db.Close()
	}
}

// kind classes Using's error: the documented ones, or "other".
func kind(err error) string {
	switch {
	case errors.Is(err, lease.ErrLeaseBusy):
		return "busy"
	case errors.Is(err, lease.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, lease.ErrNoQuorum):
		return "no-quorum"
	case errors.Is(err, lease.ErrLeaseLost):
		return "lost"
	}
	return "other"
}
