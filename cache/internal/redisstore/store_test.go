package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// reports is what a store's hooks heard.
type reports struct {
	mu                  sync.Mutex
	failed, ok, noted   int
	failedErrs          []error // what Failed was told, in order
	rejected, refilled  []string
	extended, leaseLost []string
}

func (r *reports) add(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// newStore returns a store on a fresh namespace of the test's Redis.
func newStore(t *testing.T) (*Store, *reports, string) {
	t.Helper()
	ns := redistest.Prefix(t)
	r := &reports{}
	// Background work runs as the cache runs it: cancelled and waited for
	// at the end, after the store's Close (cleanups run last first).
	var bg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); bg.Wait() })
	s := storeOn(t, redistest.Client(t), ns, r, func(_ string, work func(context.Context)) {
		bg.Go(func() { work(ctx) })
	})
	return s, r, ns
}

// storeOn returns a Store of namespace ns on rdb, closed at cleanup, whose
// hooks report to r and whose background work goes to spawn.
// tune, if any, adjusts its configuration.
func storeOn(t *testing.T, rdb redis.UniversalClient, ns string, r *reports, spawn func(string, func(context.Context)), tune ...func(*Config)) *Store {
	t.Helper()
	cfg := Config{
		Namespace: ns, InvalidationChannel: "stampede:{" + ns + "}:invalidate",
		RedisTimeout: time.Second, WaitTimeout: time.Second, LeaseTTL: 3 * time.Second, KeepFor: time.Second,
		ErrRedisTimeout: errors.New("test: timeout"), ErrClosed: errors.New("test: closed"),
		Marks: &marks.Marks{Trust: time.Second, Base: time.Now()},
	}
	for _, f := range tune {
		f(&cfg)
	}
	s := New(rdb, cfg, Hooks{
		Failed: func(_ context.Context, err error) {
			r.add(func() { r.failed, r.failedErrs = r.failed+1, append(r.failedErrs, err) })
		},
		Noted:     func(context.Context, error) { r.add(func() { r.noted++ }) },
		OK:        func(context.Context) { r.add(func() { r.ok++ }) },
		Rejected:  func(_ context.Context, k string) { r.add(func() { r.rejected = append(r.rejected, k) }) },
		Extended:  func(_ context.Context, k string) { r.add(func() { r.extended = append(r.extended, k) }) },
		LeaseLost: func(k string, _ error) { r.add(func() { r.leaseLost = append(r.leaseLost, k) }) },
		Refilled:  func(k string) { r.add(func() { r.refilled = append(r.refilled, k) }) },
		FencedOut: func(context.Context, string) {},
		Spawn:     spawn,
		Log:       func(context.Context, slog.Level, string, string, error, ...slog.Attr) {},
	})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A claim won reads the key's envelope with it; a second claim finds the
// lease held; the fill under the token stores the envelope and releases
// the lease; a fill or abandon under a token no longer held is rejected.
func TestClaimFillRead(t *testing.T) {
	s, r, ns := newStore(t)
	ctx := context.Background()
	k := rediskey.For(ns, "k")
	if err := s.Set(ctx, k, []byte("first"), 60_000); err != nil {
		t.Fatal(err)
	}
	var won Claimed
	s.ClaimMany(ctx, []rediskey.Names{k}, func(_ int, c Claimed) { won = c })
	if !won.Won || won.Err != nil || !won.Found || won.Seen != "first" || won.Token == "" {
		t.Fatalf("claim: %+v", won)
	}
	var held Claimed
	s.ClaimMany(ctx, []rediskey.Names{k}, func(_ int, c Claimed) { held = c })
	if held.Won || held.Err != nil || held.Remaining <= 0 {
		t.Fatalf("second claim: %+v", held)
	}
	var f Filled
	s.FillMany(ctx, []Fill{{K: k, Token: won.Token, Envelope: []byte("second"), KeepMillis: 60_000}}, func(_ int, got Filled) { f = got })
	if !f.Stored || f.Fenced || f.Failed {
		t.Fatalf("fill: %+v", f)
	}
	got, err := s.Read(ctx, k, Own)
	if err != nil || !got.Found || got.Envelope != "second" {
		t.Fatalf("read: %+v %v", got, err)
	}
	if shared, err := s.Read(ctx, rediskey.Hit("k"), Shared); err != nil || shared != got {
		t.Fatalf("shared read: %+v %v, want %+v", shared, err, got)
	}
	s.FillMany(ctx, []Fill{{K: k, Token: won.Token, Envelope: []byte("late"), KeepMillis: 60_000}}, func(_ int, got Filled) { f = got })
	if f.Stored || !f.Fenced {
		t.Fatalf("a fill under a released lease: %+v", f)
	}
	s.Abandon(ctx, k, won.Token)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rejected) != 1 || r.rejected[0] != "k" {
		t.Fatalf("rejected: %v, want the abandon's", r.rejected)
	}
	if r.failed != 0 || r.ok == 0 {
		t.Fatalf("failed %d, ok %d", r.failed, r.ok)
	}
}

// A read of a missing key is not found; of a key of another Redis type,
// found and empty (a corrupt entry to cache); a Delete removes the key;
// ReadMany hands each key its envelope.
func TestReads(t *testing.T) {
	s, _, ns := newStore(t)
	ctx := context.Background()
	a, b, c := rediskey.For(ns, "a"), rediskey.For(ns, "b"), rediskey.For(ns, "c")
	if err := s.Set(ctx, a, []byte("A"), 60_000); err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.(*redis.Client).LPush(ctx, b.Value, "x").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(ctx, c, Own); err != nil || got.Found {
		t.Fatalf("missing: %+v %v", got, err)
	}
	if got, err := s.Read(ctx, b, Waiting); err != nil || !got.Found || got.Envelope != "" {
		t.Fatalf("another type: %+v %v", got, err)
	}
	got := make([]Reply, 3)
	if err := s.ReadMany(ctx, []rediskey.Names{a, b, c}, func(i int, r Reply) { got[i] = r }); err != nil {
		t.Fatal(err)
	}
	if got[0] != (Reply{"A", true}) || got[1].Found || got[2].Found {
		// MGET answers nil for a key of another type.
		t.Fatalf("read many: %+v", got)
	}
	if err := s.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Read(ctx, a, Own); err != nil || r.Found {
		t.Fatalf("after delete: %+v %v", r, err)
	}
}

// An invalidation moves the counter on and raises its tags' marks to it;
// ReadGen and ReadMarks read them back.
func TestInvalidateMarks(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	before, err := s.ReadGen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := s.Invalidate(ctx, []string{"t1", "t2"}, false)
	if err != nil || gen <= before {
		t.Fatalf("invalidate: %d %v (counter was %d)", gen, err, before)
	}
	soft, err := s.Invalidate(ctx, []string{"t2"}, true)
	if err != nil || soft <= gen {
		t.Fatalf("soft invalidate: %d %v", soft, err)
	}
	ms, err := s.ReadMarks(ctx, []string{"t1", "t2", "t3", ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []marks.Mark{{Hard: gen}, {Hard: gen, Soft: soft}, {}, {}}
	for i := range want {
		if ms[i] != want[i] {
			t.Fatalf("marks %v, want %v", ms, want)
		}
	}
	if now, err := s.ReadGen(ctx); err != nil || now != soft {
		t.Fatalf("counter %d %v, want %d", now, err, soft)
	}
}
