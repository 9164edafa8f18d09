package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// raiseTo sets a to v unless it is already at least v.
func raiseTo(a *atomic.Int64, v int64) {
	for cur := a.Load(); cur < v && !a.CompareAndSwap(cur, v); cur = a.Load() {
	}
}

// Fills reach other replicas' L1 (issue 17), on a standalone Redis and on
// the 3-master Cluster: replica A (without L1) fills a
// key again and again, each time after the value vanished from Redis
// without a word (evicted, expired on the server: no Set or Delete to
// announce it), while readers on replica B (with L1) hammer it through Get
// and Fetch. B never serves a generation older than one it already served
// (checked in real time across its readers: a read that starts after
// another returned g must return g or newer), and after each of A's fills
// B stops serving the previous generation (polled, no timing threshold).
// The readers run until the fills are done (a channel says so), however
// many reads that takes: an L1 hit takes microseconds without the race
// detector, and a bound on the number of reads ran out before the fills did.
func TestL1CoherenceAfterFills(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		l1CoherenceAfterFills(t, func(t testing.TB) redis.UniversalClient { return redistest.Client(t) })
	})
	t.Run("cluster", func(t *testing.T) {
		l1CoherenceAfterFills(t, func(t testing.TB) redis.UniversalClient { return redistest.ClusterClient(t) })
	})
}

func l1CoherenceAfterFills(t *testing.T, newClient func(testing.TB) redis.UniversalClient) {
	ns := redistest.Prefix(t)
	rdb := newClient(t)
	opts := cache.Options{Namespace: ns, TTL: time.Hour, WaitTimeout: 10 * time.Second,
		L1Size: -1} // A reads Redis: the test deletes the value there behind its back
	a := newCache[string](t, newClient(t), opts)
	opts.L1Size, opts.L1TTL = 100, time.Hour // B's L1 would serve the old value for an hour
	b := newCache[string](t, newClient(t), opts)
	ctx := bounded(t, 2*time.Minute)

	fill := func(n int) {
		t.Helper()
		if err := rdb.Del(ctx, valueKeyOf(ns, "k")).Err(); err != nil {
			t.Fatal(err)
		}
		// A waits for B's compute when B's reader claimed the gap first;
		// B's fn fails, and A takes over. A notification of an earlier fill
		// still on its way when A's wait began must not answer A (each
		// waiter hears only what was published after its subscription or
		// barrier): A's answer is its own fill.
		r, err := a.Fetch(ctx, "k", func(context.Context) (string, error) { return versioned(n), nil })
		if err != nil || r.Value != versioned(n) {
			t.Fatalf("fill %d on A: %+v %v", n, r, err)
		}
	}
	fill(0)
	pollFor(t, "B's L1 to hold the key", 10*time.Second, time.Millisecond, func() bool {
		_, _, _ = b.Get(ctx, "k") // L1 fills once B's invalidation subscription is up
		return b.Stats().L1Entries == 1
	})

	var served atomic.Int64     // the newest generation a finished read on B returned
	stop := make(chan struct{}) // closed when A's fills are done
	endReads := sync.OnceFunc(func() { close(stop) })
	var wg sync.WaitGroup
	t.Cleanup(func() { endReads(); wg.Wait() }) // before the caches close, should the test stop early
	check := func(v string, before int64) {
		g, ok := versionOf(v)
		if !ok {
			t.Errorf("B served %q", v)
			return
		}
		if int64(g) < before {
			t.Errorf("B served generation %d after it had served %d", g, before)
		}
		raiseTo(&served, int64(g))
	}
	for i := range 6 {
		wg.Go(func() {
			for { // until the fills are done, bounded by ctx
				select {
				case <-stop:
					return
				case <-ctx.Done(): // the fills fail on it too, and say so
					return
				default:
				}
				before := served.Load()
				if i%2 == 0 {
					if v, found, err := b.Get(ctx, "k"); err == nil && found {
						check(v, before)
					}
					continue
				}
				// Fetch misses in the gap between A's DEL and fill: B then
				// claims or waits; its own compute fails, so only A fills.
				r, err := b.Fetch(ctx, "k", func(context.Context) (string, error) { return "", errors.New("B does not compute") })
				if err == nil {
					check(r.Value, before)
				}
			}
		})
	}
	const fills = 150
	for n := 1; n <= fills; n++ {
		fill(n)
		if n%10 == 0 || n == fills {
			want := int64(n)
			eventually(t, 10*time.Second, func() bool { return served.Load() >= want },
				func() string {
					return fmt.Sprintf("B still serves generation %d after A's fill %d", served.Load(), want)
				})
		}
	}
	endReads()
	wg.Wait()
	if v, found, err := b.Get(ctx, "k"); err != nil || !found || v != versioned(fills) {
		t.Fatalf("B after the last fill: %q %v %v", v, found, err)
	}
	if st := b.Stats(); st.L1Hits == 0 {
		t.Fatalf("B's reads never hit L1: %+v", st)
	}
}

// A fill that replaces a value still fresh on B — a background refresh on
// A, whose clock runs ahead — reaches B's L1 too.
func TestL1CoherenceAfterRefresh(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, TTL: time.Minute, Stale: time.Hour}
	a := newCache[string](t, redistest.Client(t), opts)
	clk := cache.NewClock()
	cache.UseClock(a, clk)
	opts.L1Size, opts.L1TTL = 100, time.Hour
	b := newCache[string](t, redistest.Client(t), opts)
	ctx := bounded(t, time.Minute)
	gen := atomic.Int64{}
	fn := func(context.Context) (string, error) { return versioned(int(gen.Add(1))), nil }
	if _, err := a.GetOrCompute(ctx, "k", fn); err != nil {
		t.Fatal(err)
	}
	pollFor(t, "B's L1 to hold the key", 10*time.Second, time.Millisecond, func() bool {
		_, _, _ = b.Get(ctx, "k")
		return b.Stats().L1Entries == 1
	})
	for want := 2; want <= 4; want++ {
		clk.Advance(2 * time.Minute) // stale on A, still fresh on B
		if r, err := a.Fetch(ctx, "k", fn); err != nil || r.Outcome != cache.Stale {
			t.Fatalf("A: %+v %v", r, err)
		}
		eventually(t, 10*time.Second, func() bool {
			v, _, _ := b.Get(ctx, "k")
			return v == versioned(want)
		}, func() string { v, _, _ := b.Get(ctx, "k"); return "B serves " + v + ", want " + versioned(want) })
		// The refresh has filled; its goroutine may still be ending, and a
		// stale read meanwhile would start no refresh of its own.
		pollFor(t, "A's refresh to end", 10*time.Second, time.Millisecond, func() bool { return !cache.Refreshing(a, "k") })
	}
}

// Every kind of fill announces itself on its key's channel, which L1
// tracks, as Set and Delete do: a miss's fill, a revalidation
// (ErrUnchanged), a fail-safe re-arm and a background refresh. Checked on
// the channels themselves, with a raw subscriber.
func TestEveryFillIsAnnounced(t *testing.T) {
	ns := redistest.Prefix(t)
	rdb := redistest.Client(t)
	ctx := bounded(t, 30*time.Second)
	channel := func(key string) string { return "{" + ns + ":" + key + "}:n" }
	sub := rdb.Subscribe(ctx, channel("miss"), channel("refresh"))
	t.Cleanup(func() { _ = sub.Close() })
	for range 2 {
		if _, err := sub.Receive(ctx); err != nil { // the confirmations
			t.Fatal(err)
		}
	}
	c := newCache[string](t, redistest.Client(t), cache.Options{Namespace: ns, TTL: time.Minute, Stale: time.Minute, StaleIfError: time.Hour})
	clk := cache.NewClock()
	cache.UseClock(c, clk)
	announced := func(what, key string) {
		t.Helper()
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if msg.Channel != channel(key) || msg.Payload == "abandon" || msg.Payload == "rejected" {
			t.Fatalf("%s: announced %q on %s, want a write on %s", what, msg.Payload, msg.Channel, channel(key))
		}
	}
	value := func(v string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return v, nil }
	}
	if _, err := c.GetOrCompute(ctx, "miss", value("v")); err != nil {
		t.Fatal(err)
	}
	announced("a miss's fill", "miss")

	clk.Advance(2*time.Minute + time.Millisecond) // past fresh and stale: expired, kept for stale-if-error
	if _, err := c.GetOrCompute(ctx, "miss", func(context.Context) (string, error) { return "", cache.ErrUnchanged }); err != nil {
		t.Fatal(err)
	}
	announced("a revalidation", "miss")

	clk.Advance(2*time.Minute + time.Millisecond)
	if r, err := c.Fetch(ctx, "miss", func(context.Context) (string, error) { return "", errors.New("origin down") }); err != nil || r.Outcome != cache.Stale {
		t.Fatalf("fail-safe: %+v %v", r, err)
	}
	announced("a fail-safe re-arm", "miss")

	if _, err := c.GetOrCompute(ctx, "refresh", value("v1")); err != nil {
		t.Fatal(err)
	}
	announced("a miss's fill", "refresh")
	clk.Advance(time.Minute + time.Millisecond) // stale: served, refreshed in the background
	if r, err := c.Fetch(ctx, "refresh", value("v2")); err != nil || r.Outcome != cache.Stale {
		t.Fatalf("stale: %+v %v", r, err)
	}
	announced("a background refresh", "refresh")
}
