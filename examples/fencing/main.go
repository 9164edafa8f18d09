// Command fencing shows a lease's fencing token stop a paused holder's late
// write in PostgreSQL: replica A takes the lease on report 42 and pauses (a
// GC pause, a stopped VM) past its TTL; replica B takes the lease over and
// writes the report; A resumes and writes too, and the database rejects
// A's write because its fence is below the one B stored:
//
//	UPDATE reports SET content = $1, fencing_token = $2 WHERE id = $3 AND fencing_token < $2
//
//	go run -C examples ./fencing              # a lease in one Redis
//	go run -C examples ./fencing -servers 3   # a Redlock quorum over 3 independent Redis masters
//
// It uses $DATABASE_URL and $REDIS_URLS (comma-separated redis:// URLs, as
// many as -servers) when set; otherwise it starts its own redis-servers and
// a PostgreSQL cluster on loopback ports (Debian's redis-server and
// postgresql packages).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/pgserver"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/lease"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "fencing:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("fencing", flag.ContinueOnError)
	fs.SetOutput(out)
	servers := fs.Int("servers", 1, "Redis servers: 1 for a single-instance lease, 3 or more (odd) for a Redlock quorum")
	ttl := fs.Duration("ttl", time.Second, "the lease TTL that replica A pauses past")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *servers < 1 || *servers > 9 || *ttl < 10*time.Millisecond || *ttl > time.Minute {
		return errors.New("need 1 <= servers <= 9 and 10ms <= ttl <= 1m")
	}
	urls, stopRedis, err := redisURLs(getenv("REDIS_URLS"), *servers)
	if err != nil {
		return err
	}
	defer stopRedis()
	dsn, stopPG, err := databaseURL(getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer stopPG()

	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer db.Close(context.Background())
	if err := createReports(ctx, db); err != nil {
		return err
	}
	a, closeA, err := replica(urls, *ttl, lease.Options{Retries: 3})
	if err != nil {
		return err
	}
	defer closeA()
	b, closeB, err := replica(urls, *ttl, lease.Options{Retries: 10_000, RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	defer closeB()
	kind := "a lease in one Redis"
	if *servers > 1 {
		kind = fmt.Sprintf("a Redlock quorum over %d Redis servers", *servers)
	}
	fmt.Fprintf(out, "Locks: %s. Lease TTL: %s.\n", kind, *ttl)
	r, err := PausedWriter(ctx, db, a, b, 42, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "A took the lease with fence %d, then paused past its TTL.\n", r.FenceA)
	fmt.Fprintf(out, "B took the lease over with fence %d and wrote report 42: accepted=%v.\n", r.FenceB, r.AcceptedB)
	fmt.Fprintf(out, "A resumed; its lease: %v.\n", r.LeaseA)
	fmt.Fprintf(out, "A wrote report 42 with fence %d: accepted=%v.\n", r.FenceA, r.AcceptedA)
	fmt.Fprintf(out, "Report 42 now: %q, fencing_token %d.\n", r.Content, r.Token)
	return nil
}

// createReports creates the table (if missing) and report 42, never written.
func createReports(ctx context.Context, db *pgx.Conn) error {
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS reports (
		id            bigint PRIMARY KEY,
		content       text   NOT NULL DEFAULT '',
		fencing_token bigint NOT NULL DEFAULT 0
	)`)
	if err != nil {
		return fmt.Errorf("create table reports: %w", err)
	}
	return nil
}

// writeReport stores a report only if fence is above the fence of the last
// write that was stored: the fencing check, in the database. It reports
// whether the write was accepted.
func writeReport(ctx context.Context, db *pgx.Conn, id int64, content string, fence int64) (bool, error) {
	tag, err := db.Exec(ctx, `UPDATE reports SET content = $1, fencing_token = $2 WHERE id = $3 AND fencing_token < $2`, content, fence, id)
	if err != nil {
		return false, fmt.Errorf("write report %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Result is what happened in [PausedWriter].
type Result struct {
	FenceA, FenceB       int64
	AcceptedA, AcceptedB bool
	// LeaseA is what A's extension found when it resumed.
	LeaseA error
	// Content and Token are the report's row at the end.
	Content string
	Token   int64
}

// PausedWriter plays the story with two replicas' lockers: A takes the
// lease on report id and pauses; B retries until A's lease has expired,
// takes it and writes; A resumes and writes late.
func PausedWriter(ctx context.Context, db *pgx.Conn, a, b lease.Locker, id int64, ttl time.Duration) (Result, error) {
	var r Result
	if _, err := db.Exec(ctx, `INSERT INTO reports (id) VALUES ($1) ON CONFLICT (id) DO NOTHING`, id); err != nil {
		return r, fmt.Errorf("insert report %d: %w", id, err)
	}
	name := fmt.Sprintf("reports:%d", id)
	la, err := a.Acquire(ctx, name, ttl)
	if err != nil {
		return r, fmt.Errorf("replica A: %w", err)
	}
	r.FenceA = la.Fence()
	// A is paused here: it does nothing until B has the lease, which B
	// gets only once A's lease has expired.
	lb, err := b.Acquire(ctx, name, time.Minute)
	if err != nil {
		return r, fmt.Errorf("replica B: %w", err)
	}
	defer lb.Release(context.WithoutCancel(ctx))
	r.FenceB = lb.Fence()
	if r.AcceptedB, err = writeReport(ctx, db, id, "report by B", lb.Fence()); err != nil {
		return r, err
	}
	// A resumes, unaware of the pause, and writes its report.
	r.LeaseA = la.Extend(ctx, ttl)
	if r.AcceptedA, err = writeReport(ctx, db, id, "report by A, written late", la.Fence()); err != nil {
		return r, err
	}
	err = db.QueryRow(ctx, `SELECT content, fencing_token FROM reports WHERE id = $1`, id).Scan(&r.Content, &r.Token)
	return r, err
}

// replica returns one replica's locker: its own Redis clients, a Client for
// one URL and a Quorum for several, whose servers each have a quarter of
// the TTL to answer.
func replica(urls []string, ttl time.Duration, opts lease.Options) (lease.Locker, func(), error) {
	var clients []redis.Scripter
	var closers []func() error
	closeAll := func() {
		for _, c := range closers {
			_ = c()
		}
	}
	for _, u := range urls {
		o, err := redis.ParseURL(u)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("redis URL %q: %w", u, err)
		}
		o.ContextTimeoutEnabled = true
		c := redis.NewClient(o)
		clients = append(clients, c)
		closers = append(closers, c.Close)
	}
	var l lease.Locker
	var err error
	if len(clients) == 1 {
		l, err = lease.New(clients[0], opts)
	} else {
		l, err = lease.NewQuorum(clients, lease.QuorumOptions{Options: opts, ServerTimeout: ttl / 4})
	}
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return l, closeAll, nil
}

// redisURLs returns env's URLs, or starts n redis-servers of its own.
func redisURLs(env string, n int) ([]string, func(), error) {
	if env != "" {
		urls := strings.Split(env, ",")
		if len(urls) != n {
			return nil, nil, fmt.Errorf("REDIS_URLS has %d URLs, -servers says %d", len(urls), n)
		}
		return urls, func() {}, nil
	}
	servers, err := redisserver.StartIndependent(n, redisserver.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("no REDIS_URLS, and starting redis-server failed: %w", err)
	}
	urls := make([]string, n)
	for i, s := range servers {
		urls[i] = s.URL()
	}
	return urls, func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}, nil
}

// databaseURL returns env, or starts a PostgreSQL cluster of its own.
func databaseURL(env string) (string, func(), error) {
	if env != "" {
		return env, func() {}, nil
	}
	s, err := pgserver.Start(pgserver.Options{})
	if err != nil {
		return "", nil, fmt.Errorf("no DATABASE_URL, and starting PostgreSQL failed: %w", err)
	}
	return s.DSN(), func() { _ = s.Close() }, nil
}
