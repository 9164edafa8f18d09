package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/pgtest"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	db, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	if err := createReports(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// A holder paused past its lease resumes and writes: PostgreSQL rejects the
// write, because the holder that took over stored a higher fence. With a
// lease in one Redis and with a Redlock quorum over five.
func TestPausedHolderWriteRejectedByPostgres(t *testing.T) {
	ctx := context.Background()
	db := connect(t, pgtest.Server(t).DSN())
	retry := lease.Options{Retries: 10_000, RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond}
	for i, tc := range []struct {
		name string
		pair func(t *testing.T) (a, b lease.Locker)
	}{
		{"single", func(t *testing.T) (lease.Locker, lease.Locker) {
			a, err1 := lease.New(redistest.Client(t), lease.Options{})
			b, err2 := lease.New(redistest.Client(t), retry)
			if err := errors.Join(err1, err2); err != nil {
				t.Fatal(err)
			}
			return a, b
		}},
		{"quorum", func(t *testing.T) (lease.Locker, lease.Locker) {
			servers, _ := redistest.Independent(t, 5)
			clients := func() []redis.Scripter {
				var out []redis.Scripter
				for _, s := range servers {
					c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
					t.Cleanup(func() { _ = c.Close() })
					out = append(out, c)
				}
				return out
			}
			a, err1 := lease.NewQuorum(clients(), lease.QuorumOptions{ServerTimeout: 250 * time.Millisecond})
			b, err2 := lease.NewQuorum(clients(), lease.QuorumOptions{Options: retry, ServerTimeout: 250 * time.Millisecond})
			if err := errors.Join(err1, err2); err != nil {
				t.Fatal(err)
			}
			return a, b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			id := int64(100 + i)
			r, err := PausedWriter(ctx, db, a, b, id, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if r.FenceB <= r.FenceA {
				t.Fatalf("B's fence %d not above A's %d", r.FenceB, r.FenceA)
			}
			if !r.AcceptedB || r.AcceptedA {
				t.Fatalf("accepted: B=%v A=%v, want B's write only", r.AcceptedB, r.AcceptedA)
			}
			if !errors.Is(r.LeaseA, lease.ErrLeaseLost) {
				t.Fatalf("A's lease after the pause: %v, want ErrLeaseLost", r.LeaseA)
			}
			// Read back through a connection of its own: the row is B's.
			var content string
			var token int64
			if err := connect(t, db.Config().ConnString()).QueryRow(ctx, `SELECT content, fencing_token FROM reports WHERE id = $1`, id).Scan(&content, &token); err != nil {
				t.Fatal(err)
			}
			if content != "report by B" || token != r.FenceB {
				t.Fatalf("report %d holds %q with fence %d, want B's report with %d", id, content, token, r.FenceB)
			}
		})
	}
}

// The program end to end, with the servers given by the environment.
func TestRunPrintsTheStory(t *testing.T) {
	pg := pgtest.Server(t)
	servers, _ := redistest.Independent(t, 3)
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.URL())
	}
	env := map[string]string{"DATABASE_URL": pg.DSN(), "REDIS_URLS": strings.Join(urls, ",")}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-servers", "3", "-ttl", "1s"}, &out, func(k string) string { return env[k] }); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"a Redlock quorum over 3 Redis servers", "accepted=true", "A wrote report 42 with fence", "accepted=false", `"report by B"`} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-servers", "0"}, {"-servers", "10"}, {"-ttl", "1ms"}, {"-nope"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, func(string) string { return "" }); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
