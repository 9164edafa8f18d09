package cache_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Waking waiters: an abandoned or failed compute wakes the waiters of other
// replicas at once; a waiter re-reads only once its subscription is confirmed,
// and no wake-up is lost, also when the pub/sub connection is killed.

// Guarantee (issue 14): a failed or panicked compute on replica A wakes the
// waiters on replicas B and C at once (the abandon notification), so one of
// them takes over. PollInterval, WaitTimeout and LeaseTTL are a minute: a
// waiter that missed the notification would sleep at least ~2 s before its
// first poll, so all 20 waiters answering within 1 s of the failure can
// only come from the notification. Exactly one of them computes.
func TestAbandonWakesWaitersAtOnce(t *testing.T) {
	for _, failure := range []string{"error", "panic"} {
		t.Run(failure, func(t *testing.T) {
			opts := cache.Options{TTL: time.Hour, PollInterval: time.Minute, WaitTimeout: time.Minute, LeaseTTL: time.Minute}
			rs := replicas[string](t, 3, opts)
			a := rs[0]
			ns := a.Namespace()
			h := newHeld(t, "")
			if failure == "panic" {
				h.panicWith = "origin exploded"
			} else {
				h.err = errors.New("origin failed")
			}
			leader := async(func() error {
				_, err := a.GetOrCompute(bounded(t, 30*time.Second), "k", h.fn)
				return err
			})
			within(t, h.calls, 5*time.Second, "A's compute starting")

			var takeovers atomic.Int32
			fn := func(context.Context) (string, error) { takeovers.Add(1); return "taken over", nil }
			results := make(chan valErr[string], 20)
			var wg sync.WaitGroup
			for _, c := range rs[1:] {
				for range 10 {
					wg.Go(func() {
						v, err := c.GetOrCompute(bounded(t, 30*time.Second), "k", fn)
						results <- valErr[string]{v, err}
					})
				}
			}
			// Both waiting replicas are subscribed to the key's channel (one
			// subscription per process) before A fails.
			addr := redistest.Addr(t)
			eventually(t, 5*time.Second, func() bool { return redistest.PlainSubscribers(t, addr, channelOf(ns, "k")) >= 2 },
				func() string { return "replicas B and C never subscribed to the key's channel" })

			failed := time.Now()
			h.Release()
			lr := within(t, leader, 5*time.Second, "A's caller returning after its compute failed")
			var pe *cache.PanicError
			if failure == "panic" && !errors.As(lr.v, &pe) {
				t.Fatalf("A's caller after a panic: %v, want a *PanicError", lr.v)
			}
			if failure == "error" && !errors.Is(lr.v, h.err) {
				t.Fatalf("A's caller after an error: %v", lr.v)
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			if _, ok := tryWithin(done, time.Second); !ok {
				t.Fatalf("the waiters on B and C were not woken by A's abandon: not all answered within 1s (PollInterval 1m); %d takeovers, stats B %+v C %+v",
					takeovers.Load(), rs[1].Stats(), rs[2].Stats())
			}
			took := time.Since(failed)
			close(results)
			for r := range results {
				if r.err != nil || r.v != "taken over" {
					t.Fatalf("a waiter: %q, %v", r.v, r.err)
				}
			}
			if n := takeovers.Load(); n != 1 {
				t.Fatalf("%d takeovers, want exactly 1", n)
			}
			t.Logf("all 20 waiters answered %s after A's compute failed", took.Round(time.Millisecond))
		})
	}
}

// Guarantee (issue 14): a waiter re-reads only after Redis has confirmed its
// subscription, so a fill landing while the SUBSCRIBE is in flight is not
// lost. Replica B's subscription connection reaches Redis through +30 ms of
// latency each way (its commands do not); A
// holds the lease and fills at an offset swept across B's read, lease
// attempt, subscribe and re-read. PollInterval is a minute, so a waiter that
// missed the fill would sleep ~2 s or more; each round B must answer with A's
// value within 1.5 s of the fill, without computing.
func TestWaiterSubscribedBeforeReread(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, TTL: time.Hour, PollInterval: time.Minute, WaitTimeout: time.Minute, LeaseTTL: time.Minute}
	a := newCache[string](t, redistest.Client(t), opts)
	// B's commands go straight to Redis on its one pooled connection (the
	// first dial); every later dial, which is the notifier's subscription
	// connection, goes through the slow proxy: latency between the notifier
	// and Redis only, where the order of subscribe and re-read matters.
	p, _ := proxiedClient(t, 5*time.Second)
	direct := redistest.Addr(t)
	var dials atomic.Int32
	rdb := redis.NewClient(&redis.Options{Addr: direct, PoolSize: 1, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr := p.Addr()
			if dials.Add(1) == 1 {
				addr = direct
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	b := newCache[string](t, rdb, opts)
	if err := b.Set(bounded(t, 5*time.Second), "warm", "w"); err != nil { // the pooled connection, direct
		t.Fatal(err)
	}
	p.SetLatency(30 * time.Millisecond)
	var computedByB atomic.Int32
	fnB := func(context.Context) (string, error) { computedByB.Add(1); return "b", nil }
	for i := range 25 {
		key := fmt.Sprint("k", i)
		h := newHeld(t, "from-a")
		leader := async(func() error { _, err := a.GetOrCompute(bounded(t, 30*time.Second), key, h.fn); return err })
		within(t, h.calls, 5*time.Second, "A's compute starting")
		waiter := async(func() valErr[string] {
			v, err := b.GetOrCompute(bounded(t, 30*time.Second), key, fnB)
			return valErr[string]{v, err}
		})
		// Not synchronisation: the offset varies where in B's sequence the
		// fill lands (0 to 96 ms: B's read, lease attempt and SUBSCRIBE over
		// the slow link, 30 ms each way).
		offset := time.NewTimer(time.Duration(i) * 4 * time.Millisecond)
		<-offset.C
		h.Release()
		if err := within(t, leader, 5*time.Second, "A's fill").v; err != nil {
			t.Fatalf("round %d: A: %v", i, err)
		}
		filled := time.Now()
		r, ok := tryWithin(waiter, 1500*time.Millisecond)
		if !ok {
			t.Fatalf("round %d (fill %s after B started): B did not answer within 1.5s of the fill: it missed the notification (PollInterval 1m)", i, time.Duration(i)*4*time.Millisecond)
		}
		if r.v.err != nil || r.v.v != "from-a" {
			t.Fatalf("round %d: B got %q, %v; want A's value", i, r.v.v, r.v.err)
		}
		t.Logf("round %d: B answered %s after the fill", i, time.Since(filled).Round(time.Millisecond))
	}
	if n := computedByB.Load(); n != 0 {
		t.Fatalf("B computed %d times; A filled every key", n)
	}
}

// busyObserver counts, per key, the claims a cache lost (it is about to wait).
type busyObserver struct{ n atomic.Int64 }

func (b *busyObserver) Observe(_ context.Context, e cache.Event) {
	if e.Kind == cache.EventLeaseBusy {
		b.n.Add(1)
	}
}

// numsub returns how many subscribers channel has.
func numsub(t testing.TB, rdb *redis.Client, channel string) int64 {
	m, err := rdb.PubSubNumSub(context.Background(), channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m[channel]
}

// No lost wake-ups: two waits on one key in one process (GetOrCompute and
// GetOrComputeMany, so the second joins a channel already subscribed and
// gets a PING barrier) are both woken by a fill published after they began,
// with PollInterval 1 min so that only the notification can wake them
// (the first safety-net poll is at least PollInterval/32 ≈ 1.9 s away). The
// "kill" variant kills the pub/sub connection (CLIENT KILL TYPE pubsub)
// while both wait, and starts a third wait right after the kill, racing
// the notifier's reset: its barrier PING may go out on the dead connection.
func TestNoLostWakeUps(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run("kill="+strconv.FormatBool(kill), func(t *testing.T) {
			for round := range 5 {
				noLostWakeUpsRound(t, kill, "k"+strconv.Itoa(round))
			}
		})
	}
}

func noLostWakeUpsRound(t *testing.T, kill bool, key string) {
	t.Helper()
	ns := redistest.Prefix(t)
	admin := redistest.Client(t)
	opts := cache.Options{Namespace: ns, PollInterval: time.Minute, WaitTimeout: 30 * time.Second, LeaseTTL: 30 * time.Second}
	holder := newCache[string](t, redistest.Client(t), opts)
	obs := &busyObserver{}
	wopts := opts
	wopts.Observer = obs
	w := newCache[string](t, redistest.Client(t), wopts)
	ctx := bounded(t, 20*time.Second)

	h := newHeld(t, "filled")
	held := async(func() error { _, err := holder.GetOrCompute(ctx, key, h.fn); return err })
	within(t, h.calls, 5*time.Second, "the holder's compute")

	never := func(context.Context) (string, error) { return "", errors.New("a waiter computed") }
	neverMany := func(context.Context, []string) (map[string]string, error) {
		return nil, errors.New("a waiter computed")
	}
	one := async(func() valErr[string] { v, err := w.GetOrCompute(ctx, key, never); return valErr[string]{v, err} })
	ch := channelOf(ns, key)
	pollFor(t, "the first waiter's subscription", 5*time.Second, time.Millisecond, func() bool {
		return obs.n.Load() >= 1 && numsub(t, admin, ch) >= 1
	})
	two := async(func() valErr[map[string]string] {
		m, err := w.GetOrComputeMany(ctx, []string{key}, neverMany)
		return valErr[map[string]string]{m, err}
	})
	pollFor(t, "the second waiter's claim", 5*time.Second, time.Millisecond, func() bool { return obs.n.Load() >= 2 })
	var three <-chan timed[valErr[map[string]string]]
	if kill {
		if err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		three = async(func() valErr[map[string]string] {
			m, err := w.GetOrComputeMany(ctx, []string{key}, neverMany)
			return valErr[map[string]string]{m, err}
		})
		pollFor(t, "the third waiter's claim", 5*time.Second, time.Millisecond, func() bool { return obs.n.Load() >= 3 })
		// go-redis resubscribes after the notifier's backoff.
		pollFor(t, "the resubscription", 5*time.Second, time.Millisecond, func() bool { return numsub(t, admin, ch) >= 1 })
	}
	h.Release()
	if err := within(t, held, 5*time.Second, "the holder's fill"); err.v != nil {
		t.Fatal(err.v)
	}
	const wake = 1500 * time.Millisecond // a notification's delivery, not a poll
	r1, ok := tryWithin(one, wake)
	if !ok {
		t.Errorf("%s: GetOrCompute waiter not woken within %s of the fill", key, wake)
		r1 = <-one
	}
	if r1.v.err != nil || r1.v.v != "filled" {
		t.Errorf("%s: GetOrCompute waiter: %q %v", key, r1.v.v, r1.v.err)
	}
	for i, c := range []<-chan timed[valErr[map[string]string]]{two, three} {
		if c == nil {
			continue
		}
		r, ok := tryWithin(c, wake)
		if !ok {
			t.Errorf("%s: GetOrComputeMany waiter %d not woken within %s of the fill (lost wake-up)", key, i+2, wake)
			r = <-c
		}
		if r.v.err != nil || r.v.v[key] != "filled" {
			t.Errorf("%s: GetOrComputeMany waiter %d: %v %v", key, i+2, r.v.v, r.v.err)
		}
	}
}
