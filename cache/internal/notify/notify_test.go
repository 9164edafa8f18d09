package notify

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redistest"
)

// silentProxy returns a proxy in front of the package's Redis that drops
// everything until told otherwise: a Redis that accepts connections and
// never answers. Closed at cleanup.
func silentProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(redistest.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	p.SetPartition(true)
	return p
}

// Against a Redis that accepts and never answers, the pub/sub connection's
// first command dials and handshakes for as long as go-redis' own timeouts
// allow (a 3 s ReadTimeout by default). No caller waits on that: each
// subscribe ends at its own deadline, a waiter's close does not block, and
// close returns within its grace. The goroutines caught in the handshake
// end once go-redis gives up.
func TestNotifierNeverWaitsOnAHandshake(t *testing.T) {
	p := silentProxy(t)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()}) // go-redis' default timeouts
	t.Cleanup(func() { _ = rdb.Close() })
	n := newNotifier(rdb)
	const deadline = 150 * time.Millisecond
	const slack = 450 * time.Millisecond // a generous bound for a loaded machine
	prefix := redistest.Prefix(t)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			w, err := n.Subscribe(ctx, prefix+strconv.Itoa(i))
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("subscribe %d: %v, want DeadlineExceeded", i, err)
			}
			if took > deadline+slack {
				t.Errorf("subscribe %d with a %s deadline took %s", i, deadline, took)
			}
			start = time.Now()
			w.Close()
			if took := time.Since(start); took > slack {
				t.Errorf("closing waiter %d took %s", i, took)
			}
		})
	}
	wg.Wait()
	closeWithin(t, n, closeGrace+slack)
	p.SetPartition(false)
	if !waitAtMost(&n.wire, 20*time.Second) {
		t.Fatal("the goroutines caught in the handshake did not end after go-redis' timeouts")
	}
}

// closeWithin closes n and fails the test when that took longer than bound.
func closeWithin(t *testing.T, n *Notifier, bound time.Duration) {
	t.Helper()
	start := time.Now()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > bound {
		t.Errorf("close took %s, bound %s", took, bound)
	}
}

// A subscription whose handshake failed is made again by go-redis with its
// next connection. Its waiter, whose gate never opened, is woken by what is
// published then but takes no payload (it re-reads Redis); a later waiter
// on the channel gets a barrier and takes the payload.
func TestNotifierRecoversFromAFailedHandshake(t *testing.T) {
	p := silentProxy(t)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	pub := redistest.Client(t)
	n := newNotifier(rdb)
	defer n.Close()
	ch := redistest.Prefix(t)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	first, err := n.Subscribe(ctx, ch)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first subscribe on a silent Redis: %v", err)
	}
	defer first.Close()
	p.SetPartition(false)

	// Publish until the first waiter hears it: go-redis reconnects with
	// backoff, on its own schedule.
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for heard := false; !heard; {
		if err := pub.Publish(ctx, ch, "early").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-first.C:
			heard = true
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the subscription never came back after the partition healed")
		}
	}
	if got := first.Take(); got != "" {
		t.Errorf("a waiter whose subscription failed took the payload %q; it must re-read", got)
	}

	second, err := n.Subscribe(ctx, ch)
	if err != nil {
		t.Fatalf("second subscribe: %v", err)
	}
	defer second.Close()
	if err := pub.Publish(ctx, ch, "late").Err(); err != nil {
		t.Fatal(err)
	}
	// An "early" still on its way may wake it first, without a payload:
	// its barrier was not answered yet.
	for got := ""; got == ""; {
		select {
		case <-second.C:
			got = second.Take()
		case <-ctx.Done():
			t.Fatal("second waiter never took the payload")
		}
		if got != "" && got != "late" {
			t.Errorf("second waiter took %q, published before it subscribed; want %q", got, "late")
		}
	}
}

// BenchmarkNotifierSubscribe measures a waiter's subscription: SUBSCRIBE,
// Redis' confirmation, and the UNSUBSCRIBE when it leaves, on a loopback
// Redis; par waiters at once on distinct channels, or on one channel (the
// later ones take a PING barrier).
func BenchmarkNotifierSubscribe(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "distinct"
		if shared {
			name = "one-channel"
		}
		b.Run(name, func(b *testing.B) {
			rdb := redistest.Client(b)
			n := newNotifier(rdb)
			defer n.Close()
			prefix := redistest.Prefix(b)
			ctx := context.Background()
			var seq atomic.Uint64
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ch := prefix
					if !shared {
						ch += strconv.FormatUint(seq.Add(1), 10)
					}
					w, err := n.Subscribe(ctx, ch)
					if err != nil {
						b.Error(err)
						return
					}
					w.Close()
				}
			})
		})
	}
}

// Subscriptions live only while a key has waiters: after many waits on
// distinct keys, none is left.
func TestSubscriptionsAreReleased(t *testing.T) {
	rdb := redistest.Client(t)
	n := newNotifier(rdb)
	defer n.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			ch := redistest.Prefix(t) + string(rune('a'+i%26))
			w, err := n.Subscribe(ctx, ch)
			if err != nil {
				t.Error(err)
			}
			w.Close()
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for n.Subscriptions() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d channel states left", n.Subscriptions())
		}
		time.Sleep(time.Millisecond) // unsubscribe confirmations arrive asynchronously
	}
	// Redis agrees: no channel of ours is subscribed.
	chans, err := rdb.PubSubChannels(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(chans) != 0 {
		t.Fatalf("still subscribed on the server: %v", chans)
	}
}

// A notification published after subscribe returns is always delivered.
func TestNotificationAfterSubscribeIsDelivered(t *testing.T) {
	rdb := redistest.Client(t)
	pub := redistest.Client(t)
	n := newNotifier(rdb)
	defer n.Close()
	ctx := context.Background()
	for i := range 50 {
		ch := redistest.Prefix(t)
		w, err := n.Subscribe(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, ch, "1").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.C:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: notification lost", i)
		}
		w.Close()
	}
	var _ redis.UniversalClient = rdb
}
