package notify

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/retry"
)

// A pub/sub connection: making it on first use, its receiver, and what a
// confirmation, a notification or a break received on it does.

// psConn is one pub/sub connection: the plain one, or a master's sharded one.
type psConn struct {
	addr string // the master's address; "" for the plain connection
	ps   *redis.PubSub
	dead bool // dropped: its confirmations no longer count
	// barriers are the PINGs queued or sent and not yet answered, by payload.
	barriers map[string]*subOp
	// outbox are the commands to send, in order (see outbox.go).
	outbox  []sendReq
	sending bool // a sender drains outbox
	// beats are the heartbeat PINGs written and not yet answered, by
	// payload; beatsQueued those still in outbox (heartbeat.go).
	beats       map[string]beat
	beatsQueued int
	// heard lists the permanent subscriptions (Listen) Redis has confirmed
	// on this socket since the last break seen: a confirmation of one of
	// them again is go-redis resubscribing on a new socket it dialled
	// without returning an error (see resubscribed).
	heard map[string]bool
}

func (p *psConn) sharded() bool { return p.addr != "" }

func (p *psConn) sub(ctx context.Context, channel string) error {
	if p.sharded() {
		return p.ps.SSubscribe(ctx, channel)
	}
	return p.ps.Subscribe(ctx, channel)
}

func (p *psConn) unsub(ctx context.Context, channel string) error {
	if p.sharded() {
		return p.ps.SUnsubscribe(ctx, channel)
	}
	return p.ps.Unsubscribe(ctx, channel)
}

// connLocked returns the connection for node (nil: the plain one), making
// it and its receiver on first use; call with n.mu held.
func (n *hub) connLocked(node *redis.Client) *psConn {
	addr := ""
	if node != nil {
		addr = node.Options().Addr
	}
	if c := n.conns[addr]; c != nil {
		return c
	}
	c := &psConn{addr: addr}
	if node != nil {
		c.ps = node.SSubscribe(context.Background())
	} else {
		c.ps = n.rdb.Subscribe(context.Background())
	}
	n.conns[addr] = c
	n.wire.Add(1)
	go n.receive(c)
	return c
}

// receive reads one pub/sub connection until it is closed or dropped.
func (n *hub) receive(c *psConn) {
	defer n.wire.Done()
	ctx := context.Background()
	failures := 0
	for {
		msg, err := c.ps.Receive(ctx)
		if err != nil {
			n.mu.Lock()
			over := n.closed || c.dead
			if !over && c.sharded() {
				// Broken, or a MOVED/CROSSSLOT reply: start afresh on the
				// current owners.
				n.dropLocked(c)
				over = true
			}
			n.mu.Unlock()
			if over || errors.Is(err, redis.ErrClosed) {
				return
			}
			n.reset(c)
			failures++
			// go-redis reconnects and resubscribes on the next Receive; do
			// not spin while Redis is down.
			if !retry.Sleep(n.life.Done(), retry.Backoff(failures)) {
				return
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			n.resubscribed(c, m.Kind, m.Channel)
			n.confirm(c, m.Kind, m.Channel)
		case *redis.Message:
			n.wake(c, m.Channel, m.Payload)
		case *redis.Pong:
			if !n.beatAnswered(c, m.Payload) {
				n.pong(c, m.Payload)
			}
		}
	}
}

func (n *hub) confirm(c *psConn, kind, channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.chans[channel]
	if kind == "subscribe" && (st == nil || st.conn != c || st.unsubs == 0) {
		// Only a SUBSCRIBE's confirmation: an UNSUBSCRIBE's, of a channel
		// a share left while another began listening on it, comes before
		// the SUBSCRIBE that makes the newcomer listen. Nor the
		// confirmation of a SUBSCRIBE that an UNSUBSCRIBE queued after it
		// undoes (the leaver's own): the newcomer's follows that.
		for m := range n.handlers[channel] {
			if m.OnListening != nil {
				m.OnListening()
			}
		}
	}
	if !c.sharded() && kind == "unsubscribe" {
		// A later SUBSCRIBE of it on this socket (another share listening
		// on it anew) is not go-redis resubscribing (see resubscribed).
		delete(c.heard, channel)
	}
	if st == nil || st.conn != c {
		return
	}
	if kind == "ssubscribe" {
		if st.subs > 0 {
			st.subs--
			return // subscriptions are confirmed by their barriers
		}
		// Not a reply to an SSUBSCRIBE of ours: go-redis redialled the
		// master's socket inside a call that then succeeded (a connection
		// found unusable, or handed off on a maintenance notification) and
		// resubscribed its channels there. What was published meanwhile
		// may be lost: start afresh, as after a break.
		n.dropLocked(c)
		return
	}
	if kind != "unsubscribe" && kind != "sunsubscribe" {
		return // subscriptions are confirmed by their barriers
	}
	switch {
	case st.unsubs > 0:
		st.unsubs--
		n.tidyLocked(channel, st)
	case c.sharded() && st.lastSub != nil:
		// Not a reply to a command of ours: Redis moved the slot away and
		// unsubscribed us.
		n.loseLocked(channel, st)
	}
}

// resubscribed treats a second confirmation of a permanent subscription
// on the plain connection, with no break seen in between, as a break:
// go-redis replaced the socket without returning an error (a connection
// it found unusable, or handed off on a maintenance notification, is
// redialled and resubscribed inside a Receive or a command that then
// succeeds), and what was published meanwhile may be lost. The session
// moves on, so that no heartbeat of the old socket vouches for the marks
// (heartbeat.go), and OnReset forgets what the lost announcements may
// have made stale.
func (n *hub) resubscribed(c *psConn, kind, channel string) {
	if c.sharded() || (kind != "subscribe" && kind != "psubscribe") {
		return
	}
	n.mu.Lock()
	if len(n.handlers[channel]) == 0 {
		n.mu.Unlock()
		return
	}
	again := c.heard[channel]
	if c.heard == nil {
		c.heard = make(map[string]bool)
	}
	c.heard[channel] = true
	if again {
		clear(c.heard)
		c.heard[channel] = true
		clear(c.beats)
		// The channels go-redis resubscribed on the new socket and whose
		// confirmations came before this one are no longer known as heard,
		// and no confirmation of theirs will come again: a PING behind the
		// resubscription (go-redis sends it first on a new socket) is
		// answered after all of them, and hears them then (pong).
		op := n.barrierLocked(c)
		for ch, fns := range n.handlers {
			if st := n.chans[ch]; st != nil && st.conn == c && st.lastSub != nil && st.unsubs == 0 && len(fns) > 0 {
				op.heard = append(op.heard, ch)
			}
		}
	}
	n.mu.Unlock()
	if again {
		n.session.Add(1)
		n.runResets()
	}
}

// runResets runs every share's OnReset, off n.mu.
func (n *hub) runResets() {
	n.mu.Lock()
	var fns []func()
	for m := range n.members {
		if m.begun && m.OnReset != nil {
			fns = append(fns, m.OnReset)
		}
	}
	n.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// wake hands a notification received on c to its channel's waiters; one
// from a connection the channel has left (its slot moved) was published
// before the subscription that replaced it, and is dropped.
func (n *hub) wake(c *psConn, channel, payload string) {
	n.mu.Lock()
	var buf [4]func(string)
	fns := buf[:0]
	for _, fn := range n.handlers[channel] {
		fns = append(fns, fn)
	}
	n.mu.Unlock()
	if len(fns) > 0 {
		// Every share listening on the channel hears it (two caches of
		// one namespace on one client).
		for _, fn := range fns {
			fn(payload)
		}
		return
	}
	n.mu.Lock()
	fns = fns[:0]
	if st := n.chans[channel]; st != nil && st.conn == c {
		st.wakeAll(payload)
		fns = st.openTrackersOf(fns)
	}
	n.mu.Unlock()
	for _, fn := range fns {
		fn(payload)
	}
}

// reset runs after the plain connection broke, seen by the receiver or by
// a command that failed (go-redis may have replaced the socket inside it):
// confirmations in flight are lost, and a fill may have been missed, so
// every waiter is released and woken to re-read (polling covers the gap
// until go-redis has resubscribed).
func (n *hub) reset(c *psConn) {
	n.session.Add(1) // first: see heartbeat.go
	n.runResets()
	n.mu.Lock()
	defer n.mu.Unlock()
	c.releaseBarriersLocked(errPubSubLost)
	clear(c.beats) // their answers, if any come, are on a new socket
	clear(c.heard) // the new socket's confirmations are its first
	// The UNSUBSCRIBEs still queued will go out on the new socket, after
	// go-redis resubscribed their channels: they still undo a subscription.
	queued := make(map[string]int)
	for _, req := range c.outbox {
		if req.kind == sendUnsubscribe {
			queued[req.name]++
		}
	}
	for ch, st := range n.chans {
		if st.conn != c {
			continue
		}
		st.release(errPubSubLost)
		st.unsubs = queued[ch]
		if st.lastSub != nil {
			st.lastSub = resubscribed
		}
		n.tidyLocked(ch, st)
	}
	n.regateAfterReset(c)
}

// resubscribed stands for a plain subscription that go-redis makes again
// on its next connection (it keeps the channels it was asked for): later
// waiters take a barrier behind it, sent on that connection after the
// resubscription.
var resubscribed = func() *subOp { op := newSubOp(); op.settle(nil); return op }()

// closeConn closes c's PubSub on a goroutine of its own: go-redis holds
// the PubSub's lock through a handshake, and Close takes it.
func (n *hub) closeConn(c *psConn) {
	n.wire.Add(1)
	go func() {
		defer n.wire.Done()
		_ = c.ps.Close()
	}()
}
