package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/internal/redistest"
)

// deadStore is newStore on an address nothing listens on.
func deadStore(t *testing.T) (*Store, *reports, string, *[]string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.RefusingAddr(t), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	ns := redistest.Prefix(t)
	r := &reports{}
	var spawnMu sync.Mutex
	spawned := new([]string)
	// Recorded, not run: the refill's retries are not under test.
	s := storeOn(t, rdb, ns, r, func(name string, _ func(context.Context)) {
		spawnMu.Lock()
		defer spawnMu.Unlock()
		*spawned = append(*spawned, name)
	})
	return s, r, ns, spawned
}

// With Redis unreachable (a refused dial), a waiter's read is noted and
// does not count towards the breaker; every other step counts, none
// reports a success, and the errors keep their text and their cause (%w).
// A batch read, a claim pipeline and a fill pipeline count once: a refused
// dial ends the step at once with the dial's error (redisstep's dial
// watch), before go-redis would hand each command its own copy of it.
func TestRedisDownFailureAccountingAndAWaitersReadIsOnlyNoted(t *testing.T) {
	ctx := context.Background()
	var opErr *net.OpError
	steps := []struct {
		name           string
		failed, noted  int
		run            func(t *testing.T, s *Store, ns string) error
		prefix         string
		spawnedRefills int
	}{
		{"read waiting", 0, 1, func(t *testing.T, s *Store, ns string) error {
			_, err := s.Read(ctx, rediskey.For(ns, "k"), Waiting)
			return err
		}, "cache: read {", 0},
		{"read own", 1, 0, func(t *testing.T, s *Store, ns string) error {
			_, err := s.Read(ctx, rediskey.For(ns, "k"), Own)
			return err
		}, "cache: read {", 0},
		{"read shared", 1, 0, func(t *testing.T, s *Store, ns string) error {
			_, err := s.Read(ctx, rediskey.Hit("k"), Shared)
			return err
		}, "cache: read {", 0},
		{"read many", 1, 0, func(t *testing.T, s *Store, ns string) error {
			return s.ReadMany(ctx, rediskey.ForMany(ns, []string{"a", "b"}), func(int, Reply) { t.Error("a failed read handed a reply") })
		}, "cache: read 2 keys: ", 0},
		{"set", 1, 0, func(t *testing.T, s *Store, ns string) error {
			return s.Set(ctx, rediskey.For(ns, "k"), []byte("v"), 1000)
		}, "cache: set {", 0},
		{"delete", 1, 0, func(t *testing.T, s *Store, ns string) error {
			return s.Delete(ctx, rediskey.For(ns, "k"))
		}, "cache: delete {", 0},
		{"expire", 1, 0, func(t *testing.T, s *Store, ns string) error {
			return s.Expire(ctx, rediskey.For(ns, "k"), func(string) string { return "" })
		}, "cache: expire {", 0},
		{"read gen", 1, 0, func(t *testing.T, s *Store, ns string) error {
			_, err := s.ReadGen(ctx)
			return err
		}, "cache: read {", 0},
		{"claim two keys", 1, 0, func(t *testing.T, s *Store, ns string) error {
			var errs []error
			s.ClaimMany(ctx, rediskey.ForMany(ns, []string{"a", "b"}), func(_ int, c Claimed) {
				if c.Won {
					t.Errorf("claim won with Redis down: %+v", c)
				}
				errs = append(errs, c.Err)
			})
			if len(errs) != 2 || errs[0] == nil || errs[1] == nil {
				t.Fatalf("claims' errors %v, want two", errs)
			}
			return errs[0]
		}, "cache: claim {", 0},
		{"fill two entries", 1, 0, func(t *testing.T, s *Store, ns string) error {
			var fs []Filled
			s.FillMany(ctx, []Fill{
				{K: rediskey.For(ns, "a"), Token: "t", Envelope: []byte("a"), KeepMillis: 1000},
				{K: rediskey.For(ns, "b"), Token: "t", Envelope: []byte("b"), KeepMillis: 1000},
			}, func(_ int, f Filled) { fs = append(fs, f) })
			if len(fs) != 2 || !fs[0].Failed || !fs[1].Failed || fs[0].Stored || fs[0].Fenced {
				t.Fatalf("fills %+v, want both failed", fs)
			}
			return nil
		}, "", 2},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			s, r, ns, spawned := deadStore(t)
			err := st.run(t, s, ns)
			if st.prefix != "" {
				if err == nil || !strings.HasPrefix(err.Error(), st.prefix) {
					t.Fatalf("err %v, want one starting %q", err, st.prefix)
				}
				if !errors.As(err, &opErr) {
					t.Fatalf("err %v does not wrap the dial's *net.OpError", err)
				}
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.failed != st.failed || r.noted != st.noted || r.ok != 0 {
				t.Fatalf("failed %d, noted %d, ok %d; want failed %d, noted %d, ok 0", r.failed, r.noted, r.ok, st.failed, st.noted)
			}
			if len(*spawned) != st.spawnedRefills {
				t.Fatalf("spawned %q, want %d refills", *spawned, st.spawnedRefills)
			}
		})
	}
}
