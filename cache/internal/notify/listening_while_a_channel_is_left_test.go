package notify

// A share that begins listening on a channel another share is leaving
// (its UNSUBSCRIBE queued behind the leaver's own SUBSCRIBE, or behind a
// heartbeat PING) must not be taken for listening, nor vouched for by a
// heartbeat, on the strength of what was said about the leaver's
// subscription: the UNSUBSCRIBE undoes it, and what is published between
// the UNSUBSCRIBE and the newcomer's SUBSCRIBE is lost.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// plainConn makes the hub's plain connection exist (a keeper's waiter on
// a channel of its own) and returns it.
func plainConn(t *testing.T, ctx context.Context, n *Notifier, channel string) *psConn {
	t.Helper()
	w, err := n.Subscribe(ctx, channel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.conns[""]
}

func outboxLen(n *Notifier, c *psConn) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(c.outbox)
}

// holdOutbox checks that c's outbox begins with requests of the kinds
// want, and takes those from index from on out of the sender's reach,
// returning them for releaseHeld: the test decides when they go.
func holdOutbox(t *testing.T, n *Notifier, c *psConn, from int, want ...sendKind) []sendReq {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, k := range want {
		if i >= len(c.outbox) || c.outbox[i].kind != k {
			t.Fatalf("outbox: %+v, want kinds %v first", c.outbox, want)
		}
	}
	held := append([]sendReq(nil), c.outbox[from:]...)
	c.outbox = c.outbox[:from]
	return held
}

// releaseHeld queues held (see holdOutbox) on c again.
func releaseHeld(n *Notifier, c *psConn, held []sendReq) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, req := range held {
		n.enqueueLocked(c, req)
	}
}

// waitUnsubscribed waits until n has read the confirmation of every
// UNSUBSCRIBE of ch it sent.
func waitUnsubscribed(t *testing.T, n *Notifier, ch string) {
	t.Helper()
	waitFor(t, "the UNSUBSCRIBE's confirmation to be read", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		st := n.chans[ch]
		return st != nil && st.unsubs == 0
	})
}

// The leaver's SUBSCRIBE is confirmed after the newcomer registered its
// handler, while the leaver's UNSUBSCRIBE is still to come: that
// confirmation is not the newcomer's.
func TestListeningIsNotOpenedByALeaversSubscribe(t *testing.T) {
	rdb := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	ch := prefix + ":inv"
	keep, a, b := newNotifier(rdb), newNotifier(rdb), newNotifier(rdb)
	defer keep.Close()
	defer b.Close()
	defer a.Close()
	c := plainConn(t, ctx, keep, prefix+":keep")
	thaw := sync.OnceFunc(freezeSender(t, keep, c))
	defer thaw()

	go func() { _ = a.Listen(ctx, ch, func(string) {}) }()
	waitFor(t, "a's SUBSCRIBE and barrier queued", func() bool { return outboxLen(keep, c) == 2 })
	_ = a.Close() // its UNSUBSCRIBE queued behind its SUBSCRIBE
	var listening atomic.Int64
	b.OnListening = func() { listening.Add(1) }
	listened := make(chan error, 1)
	go func() { listened <- b.Listen(ctx, ch, func(string) {}) }()
	waitFor(t, "b's SUBSCRIBE and barrier queued", func() bool { return outboxLen(keep, c) == 5 })
	// a's SUBSCRIBE, its barrier, its UNSUBSCRIBE, then b's SUBSCRIBE.
	held := holdOutbox(t, keep, c, 3, sendSubscribe, sendPing, sendUnsubscribe, sendSubscribe)
	thaw()
	waitUnsubscribed(t, keep, ch)
	if n := listening.Load(); n != 0 {
		t.Errorf("b's OnListening ran %d times on a's SUBSCRIBE, which a's UNSUBSCRIBE undid: b's L1 filled while nothing was subscribed", n)
	}
	releaseHeld(keep, c, held)
	if err := <-listened; err != nil {
		t.Fatal(err)
	}
	if listening.Load() == 0 {
		t.Fatal("b's OnListening never ran")
	}
}

// A heartbeat PING queued before the leaver's UNSUBSCRIBE, taken after
// the newcomer registered, must not vouch for the newcomer: its answer
// comes before the UNSUBSCRIBE, so a marks read sent after it is
// "covered", and a later beat then vouches for an announcement published
// between the UNSUBSCRIBE and the newcomer's SUBSCRIBE that the newcomer
// never heard.
func TestHeartbeatDoesNotVouchForAShareAcrossALeaversUnsubscribe(t *testing.T) {
	rdb := redistest.Client(t)
	pub := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	ch := prefix + ":inv"
	keep, a, b := newNotifier(rdb), newNotifier(rdb), newNotifier(rdb)
	defer keep.Close()
	defer b.Close()
	defer a.Close()
	base := time.Now()
	clock := func() int64 { return int64(time.Since(base)) }
	if err := a.Listen(ctx, ch, func(string) {}); err != nil {
		t.Fatal(err)
	}
	var beatsA, beatsB beats
	// A period the test never reaches: it queues the beats itself.
	a.Heartbeat(time.Hour, 1, clock, beatsA.fn)
	b.Heartbeat(time.Hour, 1, clock, beatsB.fn)
	c := plainConn(t, ctx, keep, prefix+":keep")
	thaw := sync.OnceFunc(freezeSender(t, keep, c))
	defer thaw()

	keep.hub.beatOnce() // queued while a is vouchable
	_ = a.Close()       // a's UNSUBSCRIBE behind the beat
	var heardB atomic.Int64
	listened := make(chan error, 1)
	go func() { listened <- b.Listen(ctx, ch, func(string) { heardB.Add(1) }) }()
	waitFor(t, "b's SUBSCRIBE and barrier queued", func() bool { return outboxLen(keep, c) == 4 })
	// The beat, a's UNSUBSCRIBE, then b's SUBSCRIBE.
	held := holdOutbox(t, keep, c, 2, sendBeat, sendUnsubscribe, sendSubscribe)
	thaw()
	waitUnsubscribed(t, keep, ch)
	coveredBefore := beatsB.count() // the beat's answer came before the UNSUBSCRIBE's confirmation
	// Published while ch has no subscription on the socket: lost to b.
	published := clock()
	if err := pub.Publish(ctx, ch, "announcement").Err(); err != nil {
		t.Fatal(err)
	}
	releaseHeld(keep, c, held)
	if err := <-listened; err != nil {
		t.Fatal(err)
	}
	n := beatsB.count()
	keep.hub.beatOnce()
	waitFor(t, "a beat for b after its SUBSCRIBE", func() bool { return beatsB.count() > n })
	if coveredBefore > 0 && heardB.Load() == 0 {
		last := beatsB.all()[beatsB.count()-1]
		t.Fatalf("b was vouched for by a beat answered before its SUBSCRIBE took effect (%d beats), then by one sent at %d, after an announcement published at %d that its handler never heard: a marks read covered by the first trusts a mark the lost announcement raised", coveredBefore, last, published)
	}
}

// A break of the plain connection while the leaver's UNSUBSCRIBE is still
// queued: go-redis resubscribes the channel on its new socket (the
// UNSUBSCRIBE has not reached it), and that confirmation, read while the
// newcomer is registered, is undone by the UNSUBSCRIBE still to be sent.
func TestListeningIsNotOpenedByAResubscribeALeaverUndoes(t *testing.T) {
	rdb := redistest.Client(t)
	pub := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	ch, keepCh := prefix+":inv", prefix+":keep"
	keep, a, b := newNotifier(rdb), newNotifier(rdb), newNotifier(rdb)
	defer keep.Close()
	defer b.Close()
	defer a.Close()
	var keepHeard atomic.Int64
	if err := keep.Listen(ctx, keepCh, func(string) { keepHeard.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(ctx, ch, func(string) {}); err != nil {
		t.Fatal(err)
	}
	base := time.Now()
	var beatsB beats
	b.Heartbeat(time.Hour, 1, func() int64 { return int64(time.Since(base)) }, beatsB.fn)
	keep.mu.Lock()
	c := keep.conns[""]
	keep.mu.Unlock()
	thaw := sync.OnceFunc(freezeSender(t, keep, c))
	defer thaw()
	_ = a.Close() // its UNSUBSCRIBE queued, not sent
	session := keep.Session()
	killPubSub(redistest.Addr(t))()
	waitFor(t, "the break seen", func() bool { return keep.Session() != session })
	var listening atomic.Int64
	b.OnListening = func() { listening.Add(1) }
	listened := make(chan error, 1)
	go func() { listened <- b.Listen(ctx, ch, func(string) {}) }()
	waitFor(t, "b's SUBSCRIBE queued", func() bool { return outboxLen(keep, c) == 3 })
	keep.mu.Lock()
	if c.outbox[0].kind != sendUnsubscribe || c.outbox[1].kind != sendSubscribe {
		keep.mu.Unlock()
		t.Fatalf("outbox: %+v, want a's UNSUBSCRIBE then b's SUBSCRIBE", c.outbox)
	}
	keep.mu.Unlock()
	// go-redis resubscribes both channels on the receiver's next Receive;
	// a message on keep's channel read after them shows they were handled.
	waitFor(t, "the resubscription of the channel", func() bool {
		keep.mu.Lock()
		defer keep.mu.Unlock()
		return c.heard[ch] && c.heard[keepCh]
	})
	if err := pub.Publish(ctx, keepCh, "after").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "keep's message after the resubscription", func() bool { return keepHeard.Load() > 0 })
	keep.mu.Lock()
	vouched := keep.hub.vouchableLocked(b, c)
	keep.mu.Unlock()
	if n := listening.Load(); n != 0 || vouched {
		t.Errorf("with a's UNSUBSCRIBE still to be sent: b's OnListening ran %d times, a beat would vouch for b: %v", n, vouched)
	}
	thaw()
	if err := <-listened; err != nil {
		t.Logf("b's Listen: %v (its gate was queued before the break)", err)
	}
	waitFor(t, "b listening after its own SUBSCRIBE", func() bool { return listening.Load() > 0 })
}
