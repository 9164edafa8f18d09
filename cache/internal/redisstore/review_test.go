package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/internal/redistest"
)

// heldShared starts a shared read of key whose GET Redis has answered but
// whose reply is held up until the returned release is called: its flight
// stays registered in the group. It returns once the GET is held.
func heldShared(t *testing.T, s *Store, key string) (release func()) {
	t.Helper()
	answered, hold := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	s.getFn = func(get GetFunc) GetFunc {
		return func(ctx context.Context, k string) (Reply, error) {
			r, err := get(ctx, k)
			held := false
			once.Do(func() { held = true })
			if held {
				close(answered)
				<-hold
			}
			return r, err
		}
	}(s.getFn)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Read(context.Background(), rediskey.Hit(key), Shared)
	}()
	<-answered
	if n := s.Flights(); n != 1 {
		t.Fatalf("%d flights while a shared read is held, want 1", n)
	}
	release = func() {
		releaseOnce.Do(func() { close(hold) })
		<-done
	}
	t.Cleanup(release)
	return release
}

// Every route by which the store learns of a state of the key (a write
// acknowledged, a read of its own or a waiter's, a batch read, a claim
// won, a fill stored, an Expire written) forgets the shared read in
// flight, so that a shared read that starts afterwards sends a GET of its
// own instead of joining an older one; a claim found held and a fill
// fenced out learn nothing and forget nothing.
func TestRoutesThatLearnOfAKeyForgetItsSharedRead(t *testing.T) {
	ctx := context.Background()
	routes := []struct {
		name   string
		forget bool
		run    func(t *testing.T, s *Store, k rediskey.Names)
	}{
		{"read own", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if _, err := s.Read(ctx, k, Own); err != nil {
				t.Fatal(err)
			}
		}},
		{"read waiting", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if _, err := s.Read(ctx, k, Waiting); err != nil {
				t.Fatal(err)
			}
		}},
		{"read many", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.ReadMany(ctx, []rediskey.Names{k}, func(int, Reply) {}); err != nil {
				t.Fatal(err)
			}
		}},
		{"set", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.Set(ctx, k, []byte("set"), 60_000); err != nil {
				t.Fatal(err)
			}
		}},
		{"delete", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}},
		{"expire", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.Expire(ctx, k, func(cur string) string { return cur + "-expired" }); err != nil {
				t.Fatal(err)
			}
		}},
		{"claim won", true, func(t *testing.T, s *Store, k rediskey.Names) {
			var c Claimed
			s.ClaimMany(ctx, []rediskey.Names{k}, func(_ int, got Claimed) { c = got })
			if !c.Won {
				t.Fatalf("claim: %+v", c)
			}
		}},
		{"claim held", false, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.rdb.Set(ctx, k.Lease(), "another", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			var c Claimed
			s.ClaimMany(ctx, []rediskey.Names{k}, func(_ int, got Claimed) { c = got })
			if c.Won || c.Err != nil {
				t.Fatalf("claim: %+v, want held", c)
			}
		}},
		{"fill stored", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.rdb.Set(ctx, k.Lease(), "tok", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			var f Filled
			s.FillMany(ctx, []Fill{{K: k, Token: "tok", Envelope: []byte("filled"), KeepMillis: 60_000}}, func(_ int, got Filled) { f = got })
			if !f.Stored {
				t.Fatalf("fill: %+v", f)
			}
		}},
		{"fill fenced", false, func(t *testing.T, s *Store, k rediskey.Names) {
			var f Filled
			s.FillMany(ctx, []Fill{{K: k, Token: "not-held", Envelope: []byte("filled"), KeepMillis: 60_000}}, func(_ int, got Filled) { f = got })
			if f.Stored || !f.Fenced {
				t.Fatalf("fill: %+v", f)
			}
		}},
	}
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			s, _, ns := newStore(t)
			k := rediskey.For(ns, "k")
			if err := s.Set(ctx, k, []byte("first"), 60_000); err != nil {
				t.Fatal(err)
			}
			release := heldShared(t, s, "k")
			r.run(t, s, k)
			if n, want := s.Flights(), map[bool]int{true: 0, false: 1}[r.forget]; n != want {
				t.Fatalf("%d shared reads in flight after %s, want %d", n, r.name, want)
			}
			release()
		})
	}
}

// deadStore is newStore on an address nothing listens on.
func deadStore(t *testing.T) (*Store, *reports, string, *[]string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	ns := redistest.Prefix(t)
	r := &reports{}
	var spawnMu sync.Mutex
	spawned := new([]string)
	s := New(rdb, Config{
		Namespace: ns, InvalidationChannel: "stampede:{" + ns + "}:invalidate",
		RedisTimeout: time.Second, WaitTimeout: time.Second, LeaseTTL: 3 * time.Second, KeepFor: time.Second,
		ErrRedisTimeout: errors.New("test: timeout"), ErrClosed: errors.New("test: closed"),
		Marks: &marks.Marks{Trust: time.Second, Base: time.Now()},
	}, Hooks{
		Failed:    func(context.Context, error) { r.add(func() { r.failed++ }) },
		Noted:     func(context.Context, error) { r.add(func() { r.noted++ }) },
		OK:        func(context.Context) { r.add(func() { r.ok++ }) },
		Rejected:  func(_ context.Context, k string) { r.add(func() { r.rejected = append(r.rejected, k) }) },
		Extended:  func(_ context.Context, k string) { r.add(func() { r.extended = append(r.extended, k) }) },
		LeaseLost: func(k string, _ error) { r.add(func() { r.leaseLost = append(r.leaseLost, k) }) },
		Refilled:  func(k string) { r.add(func() { r.refilled = append(r.refilled, k) }) },
		FencedOut: func(context.Context, string) {},
		// Recorded, not run: the refill's retries are not under test.
		Spawn: func(name string, _ func(context.Context)) {
			spawnMu.Lock()
			defer spawnMu.Unlock()
			*spawned = append(*spawned, name)
		},
		Log: func(context.Context, slog.Level, string, string, error, ...slog.Attr) {},
	})
	t.Cleanup(func() { _ = s.Close() })
	return s, r, ns, spawned
}

// With Redis unreachable (a refused dial), a waiter's read is noted and
// does not count towards the breaker; every other step counts, none
// reports a success, and the errors keep their text and their cause (%w).
// A batch read counts once; a claim or fill pipeline counts once per key:
// a refused dial is not a broken connection (redisstep.BrokenConn), so the
// pipeline's error is taken per command, and each command's counts (as it
// did before the move into this package).
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
		{"claim two keys", 2, 0, func(t *testing.T, s *Store, ns string) error {
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
		{"fill two entries", 2, 0, func(t *testing.T, s *Store, ns string) error {
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
