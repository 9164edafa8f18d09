package cache_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// roundTrips counts a client's round trips to Redis: one per command sent
// alone (a script run is one EVALSHA once the script is loaded), one per
// pipeline. Pub/sub traffic is not counted: a notification is pushed, not
// asked for.
type roundTrips struct {
	n atomic.Int64
	// marks counts the invalidation marks' reads (a pipeline of HMGETs).
	marks atomic.Int64
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !handshake(cmd) {
			r.n.Add(1) // once answered: a waiter counted at 3 is waiting
		}
		return err
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if cmds[0].Name() == "hmget" {
			r.marks.Add(1)
		}
		if !handshake(cmds[0]) {
			r.n.Add(1)
		}
		return err
	}
}

// handshake reports a new connection's set-up (HELLO, CLIENT SETINFO):
// paid once per pooled connection, not per request.
func handshake(cmd redis.Cmder) bool {
	name := cmd.Name()
	return name == "hello" || name == "client"
}

// counted is a replica whose round trips are counted.
type counted struct {
	c  *cache.Cache[string]
	rt *roundTrips
}

// since returns the round trips since the last call.
func (c *counted) since(last *int64) int64 {
	n := c.rt.n.Load()
	d := n - *last
	*last = n
	return d
}

func countedReplicas(t *testing.T, n int, opts cache.Options) []*counted {
	t.Helper()
	out := make([]*counted, n)
	for i := range out {
		rdb := redistest.Client(t)
		rt := &roundTrips{}
		rdb.AddHook(rt)
		out[i] = &counted{c: newCache[string](t, rdb, opts), rt: rt}
	}
	return out
}

// Protocol v2's round trips per path, counted at the client: a hit is one
// GET; a miss is the GET, one claim-and-reread script and one fill; a batch
// is the same three whatever its size; a stale hit answers after one GET and
// refreshes with a claim and a fill; a waiter on another replica needs no
// round trip after the leader's fill, as the notification carries the value
// (a value too large to carry costs one GET).
func TestRoundTripsPerPath(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	clk := cache.NewClock()
	// The invalidation marks, read once during the warm-up, stay trusted:
	// the paths below are counted without their amortised re-reads.
	opts := cache.Options{Namespace: ns, TTL: time.Minute, Stale: time.Hour, LeaseTTL: 10 * time.Second,
		WaitTimeout: time.Minute, PollInterval: time.Minute, InvalidationWait: time.Hour,
		L1Size: -1} // the protocol's round trips: L1 would answer the hits from memory
	rs := countedReplicas(t, 2, opts)
	for _, r := range rs {
		cache.UseClock(r.c, clk)
	}
	a, b := rs[0], rs[1]
	fn := func(v string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return v, nil }
	}
	// Load every script once (the first run of a script is EVALSHA, then
	// EVAL on NOSCRIPT), on both replicas' connections alike.
	for _, r := range rs {
		if _, err := r.c.GetOrCompute(ctx, "warm", fn("w")); err != nil {
			t.Fatal(err)
		}
		if err := r.c.Set(ctx, "warm", "w"); err != nil {
			t.Fatal(err)
		}
		if err := r.c.Delete(ctx, "warm"); err != nil {
			t.Fatal(err)
		}
	}
	var la, lb int64
	a.since(&la)
	b.since(&lb)
	check := func(path string, got, want int64) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %d round trips, want %d", path, got, want)
		} else {
			t.Logf("%s: %d round trips", path, got)
		}
	}

	if r, err := a.c.Fetch(ctx, "k", fn("v")); err != nil || r.Outcome != cache.Miss {
		t.Fatalf("miss: %+v %v", r, err)
	}
	check("miss (GET, claim-and-reread, fill)", a.since(&la), 3)
	if r, err := a.c.Fetch(ctx, "k", fn("v")); err != nil || r.Outcome != cache.Hit {
		t.Fatalf("hit: %+v %v", r, err)
	}
	check("hit (GET)", a.since(&la), 1)

	keys := []string{"b1", "b2", "b3", "b4", "b5"}
	many := func(_ context.Context, ks []string) (map[string]string, error) {
		m := map[string]string{}
		for _, k := range ks {
			m[k] = "v:" + k
		}
		return m, nil
	}
	if got, err := a.c.GetOrComputeMany(ctx, keys, many); err != nil || len(got) != len(keys) {
		t.Fatalf("batch: %v %v", got, err)
	}
	check("batch of 5 misses (MGET, claim pipeline, fill pipeline)", a.since(&la), 3)
	if got, err := a.c.GetOrComputeMany(ctx, keys, many); err != nil || len(got) != len(keys) {
		t.Fatalf("batch: %v %v", got, err)
	}
	check("batch of 5 hits (MGET)", a.since(&la), 1)

	// Stale: the caller is answered after one GET; the background refresh
	// claims and fills.
	clk.Advance(2 * time.Minute)
	if r, err := a.c.Fetch(ctx, "k", fn("v2")); err != nil || r.Outcome != cache.Stale {
		t.Fatalf("stale: %+v %v", r, err)
	}
	plain := redistest.Client(t)
	// The fill's reply is counted once a has read it, which may be after
	// another client sees the value: wait for both.
	waitFor(t, "the refresh", func() bool {
		v, _ := plain.Get(ctx, "{"+ns+":k}:v").Result()
		return strings.HasSuffix(v, "v2") && a.rt.n.Load()-la >= 3
	})
	check("stale (the caller's GET; the background refresh's claim-and-reread and fill)", a.since(&la), 3)

	check("set (the invalidation counter, then the set script)", runOK(t, func() error { return a.c.Set(ctx, "s", "x") }, a, &la), 2)
	check("delete", runOK(t, func() error { return a.c.Delete(ctx, "s") }, a, &la), 1)

	// A waiter on another replica: GET, claim (busy), GET after subscribing;
	// nothing after the leader's fill.
	for _, tc := range []struct {
		name  string
		value string
		after int64
	}{
		{"waiter", "small", 0},
		{"waiter, value too large to carry", strings.Repeat("x", 70<<10), 1},
	} {
		key := "w-" + strconv.Itoa(len(tc.value))
		release := make(chan struct{})
		started := make(chan struct{})
		led := make(chan error, 1)
		go func() {
			_, err := a.c.GetOrCompute(ctx, key, func(context.Context) (string, error) {
				close(started)
				<-release
				return tc.value, nil
			})
			led <- err
		}()
		<-started
		a.since(&la)
		waited := make(chan cache.Result[string], 1)
		go func() {
			r, err := b.c.Fetch(ctx, key, fn("not me"))
			if err != nil {
				t.Error(err)
			}
			waited <- r
		}()
		waitFor(t, "the waiter's re-read", func() bool { return b.rt.n.Load()-lb >= 3 })
		check(tc.name+", before the fill (GET, claim, GET)", b.since(&lb), 3)
		close(release)
		if err := <-led; err != nil {
			t.Fatal(err)
		}
		if r := <-waited; r.Outcome != cache.Waited || r.Value != tc.value {
			t.Fatalf("%s: outcome %v, value of %d bytes", tc.name, r.Outcome, len(r.Value))
		}
		check(tc.name+", after the fill", b.since(&lb), tc.after)
		check(tc.name+", the leader after its compute (fill)", a.since(&la), 1)
	}
}

// runOK runs f, failing the test on an error, and returns r's round trips.
func runOK(t *testing.T, f func() error, r *counted, last *int64) int64 {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
	return r.since(last)
}

// A Set during a compute takes the lease away and its notification carries
// the value: a waiter on another replica returns the Set value without a
// round trip, and the compute's late fill is rejected.
func TestSetDuringComputeReachesWaitersInItsNotification(t *testing.T) {
	ctx := context.Background()
	rs := countedReplicas(t, 3, patientOpts(t))
	a, b, admin := rs[0], rs[1], rs[2]
	// b reads the namespace's mark once, with its first entry.
	if err := admin.c.Set(ctx, "warm", "w"); err != nil {
		t.Fatal(err)
	}
	if _, found, err := b.c.Get(ctx, "warm"); !found || err != nil {
		t.Fatalf("warm: %v %v", found, err)
	}
	finish := holdCompute(t, a, "k", "computed")
	var lb int64
	b.since(&lb)
	waited := make(chan cache.Result[string], 1)
	go func() {
		r, err := b.c.Fetch(ctx, "k", func(context.Context) (string, error) { return "not me", nil })
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	waitFor(t, "the waiter's re-read", func() bool { return b.rt.n.Load()-lb >= 3 })
	b.since(&lb)
	if err := admin.c.Set(ctx, "k", "set-by-admin"); err != nil {
		t.Fatal(err)
	}
	if r := <-waited; r.Outcome != cache.Waited || r.Value != "set-by-admin" {
		t.Fatalf("waiter: %+v", r)
	}
	if n := b.since(&lb); n != 0 {
		t.Errorf("the waiter made %d round trips after the Set, want 0", n)
	}
	finish()
	if n := a.c.Stats().FencedOut; n != 1 {
		t.Fatalf("FencedOut=%d: the compute's late fill was not rejected", n)
	}
	if v, _, err := admin.c.Get(ctx, "k"); err != nil || v != "set-by-admin" {
		t.Fatalf("stored %q %v", v, err)
	}
}

// A Delete during a compute takes the lease away: the next caller computes
// the value afresh at once instead of waiting for a compute whose result is
// already outdated, and that compute's late fill is rejected.
func TestDeleteDuringComputeFreesTheKeyAtOnce(t *testing.T) {
	ctx := context.Background()
	rs := countedReplicas(t, 2, patientOpts(t))
	a, b := rs[0], rs[1]
	finish := holdCompute(t, a, "k", "outdated")
	if err := b.c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	r, err := b.c.Fetch(ctx, "k", func(context.Context) (string, error) { return "fresh", nil })
	if err != nil || r.Outcome != cache.Miss || r.Value != "fresh" {
		t.Fatalf("after the Delete: %+v %v", r, err)
	}
	finish()
	if n := a.c.Stats().FencedOut; n != 1 {
		t.Fatalf("FencedOut=%d", n)
	}
	if v, _, err := b.c.Get(ctx, "k"); err != nil || v != "fresh" {
		t.Fatalf("stored %q %v: the outdated compute overwrote the fresh one", v, err)
	}
}

// patientOpts are options under which waiters neither poll nor time out
// while a test runs: every wake-up is a notification.
func patientOpts(t *testing.T) cache.Options {
	return cache.Options{Namespace: redistest.Prefix(t), LeaseTTL: 10 * time.Second, WaitTimeout: time.Minute, PollInterval: time.Minute,
		InvalidationWait: time.Hour, // marks read once stay trusted: no amortised re-read in the counts
		L1Size:           -1}        // every read is a Redis read, as the counts assume
}

// holdCompute starts a compute of key on r that returns value once finish
// is called, and returns when it runs; finish waits for the call's end.
func holdCompute(t *testing.T, r *counted, key, value string) (finish func()) {
	t.Helper()
	o := &origin[string]{value: value, started: make(chan struct{}, 1), release: make(chan struct{})}
	led := make(chan error, 1)
	go func() {
		_, err := r.c.GetOrCompute(context.Background(), key, o.fn)
		led <- err
	}()
	<-o.started
	return func() {
		t.Helper()
		close(o.release)
		if err := <-led; err != nil {
			t.Fatal(err)
		}
	}
}
