package notify

import "context"

// A pub/sub connection's commands go out in the order they were queued,
// from a sender goroutine of the connection's own, never under the
// notifier's lock. go-redis runs a connection's dial and handshake inside
// the first command that needs it (and after every reconnect), holding the
// PubSub's lock; against a Redis that accepts and never answers that lasts
// its DialTimeout and ReadTimeout, which no context cuts short. Callers
// wait for a command's answer (its subOp), bounded by their own context,
// and Close does not wait on it.
//
// Queuing under n.mu keeps a connection's commands in the order they were
// decided: a subscription's barrier goes out after its (S)SUBSCRIBE, and an
// (S)UNSUBSCRIBE after the subscribe it undoes.

// sendKind is what a queued command does.
type sendKind uint8

const (
	sendSubscribe sendKind = iota
	sendUnsubscribe
	sendPing // a barrier
	sendBeat // a heartbeat's PING (heartbeat.go)
)

// sendReq is one queued command: a channel's (S)SUBSCRIBE or
// (S)UNSUBSCRIBE, or a barrier's PING, with the operation its answer
// settles.
type sendReq struct {
	kind sendKind
	name string // the channel, or the PING's payload
	op   *subOp // a barrier's; nil for the others
}

// enqueueLocked queues req on c, starting c's sender when none runs; call
// with n.mu held.
func (n *hub) enqueueLocked(c *psConn, req sendReq) {
	c.outbox = append(c.outbox, req)
	if !c.sending {
		c.sending = true
		n.wire.Add(1)
		go n.sendQueued(c)
	}
}

// sendQueued sends c's queued commands in order until none is left, or the
// notifier closes, or c is dropped (whose commands were failed then).
func (n *hub) sendQueued(c *psConn) {
	defer n.wire.Done()
	for {
		n.mu.Lock()
		if n.closed || c.dead || len(c.outbox) == 0 {
			c.outbox, c.sending = nil, false
			n.mu.Unlock()
			return
		}
		req := c.outbox[0]
		c.outbox[0] = sendReq{}
		c.outbox = c.outbox[1:]
		if req.op != nil {
			req.op.sent = true
		}
		if req.kind == sendBeat && !n.takeBeatLocked(c, req.name) {
			n.mu.Unlock()
			continue // it would vouch for no share (any more)
		}
		n.mu.Unlock()
		if err := c.send(n.life, req); err != nil {
			n.mu.Lock()
			reset := n.sendFailedLocked(c, req, err)
			n.mu.Unlock()
			if reset {
				n.reset(c)
			}
		}
	}
}

// send writes one command on the connection, bounded by ctx (which ends
// at close) and by go-redis' own dial and write timeouts.
func (c *psConn) send(ctx context.Context, req sendReq) error {
	switch req.kind {
	case sendSubscribe:
		return c.sub(ctx, req.name)
	case sendUnsubscribe:
		return c.unsub(ctx, req.name)
	default:
		return c.ps.Ping(ctx, req.name)
	}
}

// sendFailedLocked handles a command that could not be sent; call with
// n.mu held. On the plain connection it reports that the notifier must
// reset: go-redis reconnects inside the failed command (or the next one),
// so the socket our other commands went out on, and the messages on their
// way on it, may be gone without the receiver ever seeing it break.
// go-redis keeps the channels it was asked for and subscribes them again on
// its next socket.
func (n *hub) sendFailedLocked(c *psConn, req sendReq, err error) (reset bool) {
	if req.op != nil {
		defer req.op.settle(err) // a no-op when close or a drop settled it already
	}
	switch {
	case n.closed || c.dead:
		return false
	case c.sharded():
		n.dropLocked(c) // the master is unreachable: its channels go to their current owners
		return false
	}
	switch req.kind {
	case sendPing:
		delete(c.barriers, req.name)
	case sendBeat:
		delete(c.beats, req.name)
	}
	return true
}
