package notify

// The shares of one client's hub: one connection and one heartbeat for
// all, each share with its own handlers, waiters, callbacks and clock, and
// a share's Close that disturbs none of the others.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// beats records a share's heartbeat answers.
type beats struct {
	mu   sync.Mutex
	sent []int64
}

func (b *beats) fn(_ uint64, sent int64) {
	b.mu.Lock()
	b.sent = append(b.sent, sent)
	b.mu.Unlock()
}

func (b *beats) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sent)
}

func (b *beats) all() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int64(nil), b.sent...)
}

// waitFor polls cond, bounded.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(time.Millisecond) // answers arrive asynchronously: poll
	}
}

// Two shares of one client use one connection and one heartbeat: a Want
// from either runs it, each share's callback gets the time on its own
// clock, and after one share closed the other's waiters, handler and
// heartbeat go on.
func TestSharesOfOneClientShareConnectionAndHeartbeat(t *testing.T) {
	rdb := redistest.Client(t)
	pub := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := newNotifier(rdb), newNotifier(rdb)
	defer b.Close()
	defer a.Close()
	if a.hub != b.hub {
		t.Fatal("two notifiers on one client have hubs of their own")
	}
	prefix := redistest.Prefix(t)
	invA, invB, key := prefix+":inv-a", prefix+":inv-b", prefix+":key"
	var heardA, heardB atomic.Int64
	if err := a.Listen(ctx, invA, func(string) { heardA.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Listen(ctx, invB, func(string) { heardB.Add(1) }); err != nil {
		t.Fatal(err)
	}
	// Clocks far apart: a callback handed the other share's time shows.
	var tickA, tickB atomic.Int64
	tickB.Store(1 << 40)
	var beatsA, beatsB beats
	a.Heartbeat(10*time.Millisecond, 2, func() int64 { return tickA.Add(1) }, beatsA.fn)
	b.Heartbeat(30*time.Millisecond, 2, func() int64 { return tickB.Add(1) }, beatsB.fn)
	a.Start()
	waitFor(t, "a beat answered for both shares", func() bool { return beatsA.count() > 0 && beatsB.count() > 0 })
	for _, s := range beatsA.all() {
		if s >= 1<<40 {
			t.Fatalf("a's callback got %d, a time of b's clock", s)
		}
	}
	for _, s := range beatsB.all() {
		if s < 1<<40 {
			t.Fatalf("b's callback got %d, a time of a's clock", s)
		}
	}
	a.mu.Lock()
	conns := len(a.conns)
	a.mu.Unlock()
	if conns != 1 {
		t.Fatalf("%d connections for two shares", conns)
	}

	// Both wait on one key; a closes: its waiter is woken and its
	// Subscribe answers errClosed, b's waiter still hears the key.
	wa, err := a.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := b.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wa.C:
	default:
		t.Error("a's waiter was not woken by a's Close")
	}
	wa.Close()
	if w, err := a.Subscribe(ctx, key); !errors.Is(err, errClosed) {
		t.Errorf("a's Subscribe after its Close: %v, want errClosed", err)
	} else {
		w.Close()
	}
	if err := pub.Publish(ctx, key, "fill").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wb.C:
		if p := wb.Take(); p != "fill" {
			t.Errorf("b's waiter took %q, want the fill", p)
		}
	case <-ctx.Done():
		t.Fatal("b's waiter lost its notification after a closed")
	}
	if err := pub.Publish(ctx, invB, "x").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's handler to hear its channel after a closed", func() bool { return heardB.Load() > 0 })
	waitFor(t, "a's invalidation channel to be unsubscribed", func() bool { return redistest.PlainSubscribers(t, redistest.Addr(t), invA) == 0 })

	// b's heartbeat goes on, at b's own period now.
	n := beatsB.count()
	b.Start()
	waitFor(t, "b's heartbeat answered after a closed", func() bool { return beatsB.count() > n })
	if heardA.Load() != 0 {
		t.Errorf("a's handler heard %d messages it was never sent", heardA.Load())
	}
}

// Two shares that listen on one channel (two caches of one namespace on
// one client): one subscription, each handler hears every message, the
// second share's OnListening runs although Redis confirmed no SUBSCRIBE
// for it, and the first share's Close leaves the second listening.
func TestSharesListeningOnOneChannel(t *testing.T) {
	rdb := redistest.Client(t)
	pub := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := newNotifier(rdb), newNotifier(rdb)
	defer b.Close()
	defer a.Close()
	ch := redistest.Prefix(t) + ":inv"
	var listeningA, listeningB, heardA, heardB atomic.Int64
	a.OnListening = func() { listeningA.Add(1) }
	b.OnListening = func() { listeningB.Add(1) }
	if err := a.Listen(ctx, ch, func(string) { heardA.Add(1) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a's OnListening", func() bool { return listeningA.Load() > 0 })
	if err := b.Listen(ctx, ch, func(string) { heardB.Add(1) }); err != nil {
		t.Fatal(err)
	}
	// Listen returns once the gate opened, and OnListening runs before
	// the gate's waiters are let go.
	if listeningB.Load() == 0 {
		t.Fatal("b's OnListening did not run for a channel a subscribed already")
	}
	if n := redistest.PlainSubscribers(t, redistest.Addr(t), ch); n != 1 {
		t.Fatalf("%d subscriptions to the channel, want 1", n)
	}
	if err := pub.Publish(ctx, ch, "x").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both handlers to hear the message", func() bool { return heardA.Load() == 1 && heardB.Load() == 1 })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, ch, "y").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's handler to hear the message after a closed", func() bool { return heardB.Load() == 2 })
	if n := redistest.PlainSubscribers(t, redistest.Addr(t), ch); n != 1 {
		t.Fatalf("%d subscriptions to the channel after a closed, want b's", n)
	}
	if heardA.Load() != 1 {
		t.Errorf("a's handler heard %d messages, want 1 (none after its Close)", heardA.Load())
	}
}

// The last share's Close closes the hub; a notifier made afterwards on
// the same client gets a new one that works.
func TestLastShareClosesTheHub(t *testing.T) {
	rdb := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := newNotifier(rdb), newNotifier(rdb)
	if _, err := a.Subscribe(ctx, redistest.Prefix(t)); err != nil {
		t.Fatal(err)
	}
	h := a.hub
	_ = a.Close()
	if h.life.Err() != nil {
		t.Fatal("the hub closed while b uses it")
	}
	_ = b.Close()
	if h.life.Err() == nil {
		t.Fatal("the hub outlived its last share")
	}
	c := newNotifier(rdb)
	defer c.Close()
	if c.hub == h {
		t.Fatal("a new share got the closed hub")
	}
	w, err := c.Subscribe(ctx, redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
}

// A share that listens on a channel another share listened on and left
// (its UNSUBSCRIBE confirmed on the same socket) is not go-redis
// resubscribing after a silent redial: the session stays, and no share's
// OnReset runs (which would clear every cache's L1 on the client).
func TestListeningAgainAfterAnUnsubscribeIsNoBreak(t *testing.T) {
	rdb := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	keep := newNotifier(rdb)
	defer keep.Close()
	var resets atomic.Int64
	keep.OnReset = func() { resets.Add(1) }
	if err := keep.Listen(ctx, prefix+":keep", func(string) {}); err != nil {
		t.Fatal(err)
	}
	session := keep.Session()
	for round := range 3 {
		n := newNotifier(rdb)
		if err := n.Listen(ctx, prefix+":again", func(string) {}); err != nil {
			t.Fatal(err)
		}
		_ = n.Close()
		waitFor(t, "the channel to be unsubscribed", func() bool {
			return redistest.PlainSubscribers(t, redistest.Addr(t), prefix+":again") == 0
		})
		if keep.Session() != session || resets.Load() != 0 {
			t.Fatalf("round %d: session %d (was %d), %d resets: listening again was taken for a break", round, keep.Session(), session, resets.Load())
		}
	}
}

// A share that begins listening on a channel another share is leaving
// (its UNSUBSCRIBE still unconfirmed) is not listening until its own
// SUBSCRIBE took effect: the UNSUBSCRIBE's confirmation, read while the
// newcomer's handler is registered, does not run its OnListening (which
// would let its L1 fill while nothing is subscribed). The test sends the
// UNSUBSCRIBE and holds the SUBSCRIBE back, as a sender descheduled
// between the two commands would.
func TestListeningOnAChannelBeingLeftWaitsForItsSubscribe(t *testing.T) {
	rdb := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch := redistest.Prefix(t) + ":inv"
	a, b := newNotifier(rdb), newNotifier(rdb)
	defer b.Close()
	defer a.Close()
	if err := a.Listen(ctx, ch, func(string) {}); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	c := a.conns[""]
	a.mu.Unlock()
	thaw := sync.OnceFunc(freezeSender(t, a, c))
	defer thaw()
	_ = a.Close() // its UNSUBSCRIBE queued, not sent
	var listening atomic.Int64
	b.OnListening = func() { listening.Add(1) }
	listened := make(chan error, 1)
	go func() { listened <- b.Listen(ctx, ch, func(string) {}) }()
	waitFor(t, "b's SUBSCRIBE to be queued", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(c.outbox) == 3 // the UNSUBSCRIBE, b's SUBSCRIBE, its barrier
	})
	held := holdOutbox(t, b, c, 1, sendUnsubscribe, sendSubscribe)
	thaw()
	waitUnsubscribed(t, b, ch)
	if n := listening.Load(); n != 0 {
		t.Fatalf("b's OnListening ran %d times before its SUBSCRIBE was sent", n)
	}
	releaseHeld(b, c, held)
	if err := <-listened; err != nil {
		t.Fatal(err)
	}
	if listening.Load() == 0 {
		t.Fatal("b's OnListening never ran")
	}
}
