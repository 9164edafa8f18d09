package notify

// After a reset, go-redis' own resubscription is told apart from the
// notifier's commands: its confirmation never opens a later subscribe's gate
// early, and no wake-up is lost while that subscribe is still queued.

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redistest"
)

// freezeSender stops c's outbox from being sent: commands queued from now
// on stay queued until thaw is called. It waits for a running sender to
// finish first. It stands for a sender that is slow to get to the queue (a
// handshake in progress, a loaded machine): every command still goes out,
// in order, once thawed.
func freezeSender(t *testing.T, n *Notifier, c *psConn) (thaw func()) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n.mu.Lock()
		if !c.sending {
			c.sending = true
			n.mu.Unlock()
			break
		}
		n.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the sender never finished")
		}
		time.Sleep(time.Millisecond) // the sender exits asynchronously: poll
	}
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		c.sending = false
		if len(c.outbox) > 0 && !n.closed {
			c.sending = true
			n.wire.Add(1)
			go n.sendQueued(c)
		}
	}
}

// Guarantee 2 (the gate) right after a reconnect of the plain connection.
//
// Fixed (found by the review of the outbox; see the comment on sendLocked
// and sendFailedLocked). The interleaving that broke it: w1 is X's only waiter. It closes; its
// UNSUBSCRIBE X is queued but not sent yet (go-redis still has X in the
// channels it keeps). The connection breaks (a proxy reset): go-redis
// reconnects inside the receiver's Receive and sends SUBSCRIBE X again on
// the new socket, then the receiver resets the notifier, which fails X's
// pending unsubscribe and, X having no waiter and no lastSub, forgets X's
// state. A fill "old" is published on X: the new socket carries, in order,
// the resubscription's confirmation and "old". A new waiter w2 joins X
// after that publish: no state, so it queues SUBSCRIBE X (behind the
// UNSUBSCRIBE), pending = [sub2]. The receiver reads the resubscription's
// confirmation and, matching by position, settles sub2 with it: w2's
// subscribe returns nil and its gate is open. The receiver then delivers
// "old", and w2 takes it: a notification published before w2 joined
// answers it (in the cache: a value that a Set or Delete which returned
// before the wait began has replaced). Why: after a reset, confirmations of
// go-redis' own resubscription are told apart from replies to the
// notifier's commands only by pending being empty; the outbox lets a
// channel's state be forgotten while its UNSUBSCRIBE is still queued (so
// go-redis resubscribes it), and the next subscribe's pending entry takes
// the resubscription's confirmation. Found first by
// TestOutboxChurnPlainProxyReset (a round-6 waiter took round 5's
// payload).
func TestOutboxGateNotOpenedByAResubscriptionConfirmation(t *testing.T) {
	r := resubscriptionRace(t)
	sctx, scancel := context.WithTimeout(r.ctx, 5*time.Second)
	w2, err := r.n.Subscribe(sctx, r.ch)
	scancel()
	defer w2.Close()
	t.Logf("w2's subscribe: %v", err)
	r.thaw()
	if err != nil {
		return // its gate is closed: it re-reads, as the guarantee wants
	}
	select {
	case <-w2.C:
		if got := w2.Take(); got == "old" {
			t.Errorf("w2 took %q, published before it joined: its gate was opened by go-redis' resubscription, not by its own SUBSCRIBE", got)
		}
	case <-time.After(2 * time.Second):
	}
}

// Guarantee 1 in the same interleaving: w2's subscribe returned nil on
// go-redis' resubscription's confirmation, while X's queued UNSUBSCRIBE and
// w2's own SUBSCRIBE are still to go out.
//
// Fixed (found by the review of the outbox; see the comment on sendLocked
// and sendFailedLocked). The interleaving that broke it (continuing the one above): the sender sends
// the UNSUBSCRIBE X (Redis unsubscribes the connection from X); a fill is
// published now, after w2's subscribe returned nil; then the sender sends
// w2's SUBSCRIBE X. The fill reached no subscriber of this process, and
// nothing wakes w2: its subscription's confirmation is taken for a
// resubscription (pending is empty) and no reset happens. With
// PollInterval 1 min w2 waits a minute for a value that is in Redis. The
// test holds w2's SUBSCRIBE back until the fill is published: a sender
// descheduled between two commands does the same.
func TestOutboxNoLostWakeUpAfterAResubscriptionConfirmation(t *testing.T) {
	r := resubscriptionRace(t)
	sctx, scancel := context.WithTimeout(r.ctx, 5*time.Second)
	w2, err := r.n.Subscribe(sctx, r.ch)
	scancel()
	defer w2.Close()
	if err != nil {
		t.Skipf("w2's subscribe failed (%v): the interleaving did not happen", err)
	}
	// Send the UNSUBSCRIBE only; hold w2's SUBSCRIBE back.
	r.n.mu.Lock()
	if len(r.c.outbox) != 2 || r.c.outbox[0].kind != sendUnsubscribe || r.c.outbox[1].kind != sendSubscribe {
		r.n.mu.Unlock()
		t.Fatalf("outbox: %+v, want the UNSUBSCRIBE then w2's SUBSCRIBE", r.c.outbox)
	}
	held := r.c.outbox[1]
	r.c.outbox = r.c.outbox[:1]
	r.n.mu.Unlock()
	r.thaw()
	r.poll("the UNSUBSCRIBE never took effect", func() bool { return redistest.PlainSubscribers(t, redistest.Addr(t), r.ch) == 0 })
	if err := r.pub.Publish(r.ctx, r.ch, "fill").Err(); err != nil {
		t.Fatal(err)
	}
	r.n.mu.Lock()
	r.n.enqueueLocked(r.c, held)
	r.n.mu.Unlock()
	r.poll("w2's SUBSCRIBE never took effect", func() bool { return redistest.PlainSubscribers(t, redistest.Addr(t), r.ch) == 1 })
	deadline := time.After(3 * time.Second)
	for {
		select {
		case <-w2.C:
			if got := w2.Take(); got == "fill" || got == "" {
				return // woken for the fill (or told to re-read)
			}
		case <-deadline:
			t.Fatal("lost wake-up: w2's subscribe returned nil, a fill was published after it, and w2 was never woken")
		}
	}
}

// resubRace is the interleaving of the two tests above, up to w2's join.
type resubRace struct {
	ctx  context.Context
	n    *Notifier
	c    *psConn
	pub  *redis.Client
	ch   string
	thaw func()
	poll func(what string, cond func() bool)
}

// resubscriptionRace: w1, X's only waiter, closes with its UNSUBSCRIBE held
// in the outbox; the connection is reset, go-redis resubscribes X on the new
// socket (whose traffic arrives 300 ms late), the notifier resets and
// forgets X, and "old" is published on X. The caller joins w2 next.
func resubscriptionRace(t *testing.T) *resubRace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	p, err := faultproxy.New(redistest.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	pub := redistest.Client(t)
	n := newNotifier(rdb)
	t.Cleanup(func() { _ = n.Close() })
	ch := hashTagged(t, 1)[0]

	w1, err := n.Subscribe(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	c := n.conns[""]
	n.mu.Unlock()
	thaw := freezeSender(t, n, c)
	t.Cleanup(thaw)
	w1.Close() // UNSUBSCRIBE queued, not sent: go-redis still keeps the channel

	// What the new socket carries arrives 300 ms late: time to join before
	// the receiver reads it.
	p.SetLatency(300 * time.Millisecond)
	session := n.Session()
	p.Reset()
	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(time.Millisecond) // state Redis and the receiver change: poll
		}
	}
	// The receiver resets the notifier, then redials on its next Receive:
	// the resubscription follows the reset.
	poll("the notifier never reset", func() bool { return n.Session() != session })
	poll("go-redis never resubscribed", func() bool { return redistest.PlainSubscribers(t, redistest.Addr(t), ch) == 1 })
	if err := pub.Publish(ctx, ch, "old").Err(); err != nil {
		t.Fatal(err)
	}

	return &resubRace{ctx: ctx, n: n, c: c, pub: pub, ch: ch, thaw: thaw, poll: poll}
}
