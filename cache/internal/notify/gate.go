package notify

import (
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The gates: each channel's state (its connection, its waiters, the
// commands in flight on it) and the barrier PINGs whose answers open a
// waiter to notifications, so that a waiter takes only a notification
// published after its own subscription took effect.

// channelState is what the notifier knows of one channel.
type channelState struct {
	// conn carries the channel's subscription; nil while it has none.
	conn    *psConn
	waiters map[*Waiter]struct{}
	// unsubs counts the (S)UNSUBSCRIBEs queued on conn and not yet
	// confirmed: an unsubscribe confirmation beyond them (sharded) is Redis
	// moving the slot away.
	unsubs int
	// subs counts the SSUBSCRIBEs queued on a sharded conn and not yet
	// confirmed: a confirmation beyond them is go-redis resubscribing on a
	// socket it redialled without an error (see confirm).
	subs int
	// lastSub is the gate of the newest subscribe when no unsubscribe
	// followed it: the barrier PING queued right behind the (S)SUBSCRIBE.
	// Its PONG, matched by a payload of its own, proves the channel is
	// subscribed on the connection that answered: go-redis sends a new
	// connection's resubscriptions before anything else on it.
	lastSub *subOp
}

// subOp is a waiter's gate: a barrier PING whose answer someone waits for
// (a subscription's, or one behind notifications already on their way).
type subOp struct {
	ready chan struct{} // closed once settled: answered, or failed (err)
	err   error         // why it failed; set before ready closes
	// sent: its PING has left the outbox (under n.mu). Only a gate not yet
	// sent may be shared: Redis may have answered a sent one before a
	// notification published after the new waiter's own read began.
	sent bool
	// opens are the shares whose Listen waits on it: their OnListening
	// runs when it is answered (under n.mu).
	opens []*Notifier
	// heard are the permanent subscriptions a silent redial's PING finds
	// resubscribed on the new socket when it is answered (conn.go,
	// resubscribed).
	heard []string
	// tracks are the trackers it opens when it is answered, those whose
	// gate it still is then (track.go).
	tracks []*Waiter
}

func newSubOp() *subOp {
	return &subOp{ready: make(chan struct{})}
}

// settled reports whether op was confirmed or failed.
func (op *subOp) settled() bool {
	select {
	case <-op.ready:
		return true
	default:
		return false
	}
}

// opened reports whether Redis confirmed op; call with n.mu held.
func (op *subOp) opened() bool { return op.settled() && op.err == nil }

// settle confirms op (err nil) or fails it, once; call with n.mu held.
func (op *subOp) settle(err error) {
	if op.settled() {
		return
	}
	op.err = err
	close(op.ready)
}

// errPubSubLost settles the commands of a pub/sub connection that broke or
// was dropped: their answers will not come.
var errPubSubLost = errors.New("stampede: pub/sub connection lost")

// wakeAll tells every waiter of the channel to re-read, handing each the
// notification's payload ("" when there is none: a broken connection);
// call with n.mu held. Only a waiter whose gate is open takes the payload:
// the notification was published after its subscription or barrier took
// effect, so after the re-read that follows it. An older one may carry a
// value that a Set or Delete has since replaced, so the others re-read
// Redis instead.
func (st *channelState) wakeAll(payload string) {
	for w := range st.waiters {
		if w.track != nil {
			continue // told by wake, off the lock (track.go)
		}
		if payload != "" && !w.gate.opened() {
			w.last = ""
		} else {
			w.last = payload
		}
		select {
		case w.C <- struct{}{}:
		default:
		}
	}
}

// release forgets the commands in flight on a connection that broke or was
// dropped, failing the subscription's gate with err to free whoever waits
// on it, and wakes the waiters to re-read; call with n.mu held.
func (st *channelState) release(err error) {
	if st.lastSub != nil {
		st.lastSub.settle(err)
	}
	st.unsubs = 0
	st.wakeAll("")
	st.loseTrackers()
}

// tidyLocked forgets channel's state once nothing refers to it; call with
// n.mu held.
func (n *hub) tidyLocked(channel string, st *channelState) {
	if len(st.waiters) == 0 && st.unsubs == 0 && st.lastSub == nil {
		delete(n.chans, channel)
	}
}

// sendLocked queues the subscription of channel on its connection (node's
// sharded one, or the plain one when node is nil), and the barrier that
// confirms it, which it returns; call with n.mu held.
//
// Confirmations are not matched to the (S)SUBSCRIBE itself: go-redis
// resubscribes on its own after a reconnect, and those confirmations look
// the same. The PONG of a PING with a payload of its own cannot be mistaken.
func (n *hub) sendLocked(channel string, st *channelState, node *redis.Client) *subOp {
	conn := n.connLocked(node)
	if st.conn != conn {
		st.unsubs, st.subs = 0, 0 // those were queued on another connection
	}
	st.conn = conn
	st.subs++
	delete(n.lost, channel)
	n.enqueueLocked(conn, sendReq{kind: sendSubscribe, name: channel})
	st.lastSub = n.barrierLocked(conn)
	st.regateTrackers(st.lastSub)
	return st.lastSub
}

// barrierLocked queues a PING on conn and returns the barrier its answer
// confirms; call with n.mu held.
func (n *hub) barrierLocked(conn *psConn) *subOp {
	n.barrierSeq++
	id := "stampede-barrier-" + strconv.FormatUint(n.barrierSeq, 10)
	op := newSubOp()
	if conn.barriers == nil {
		conn.barriers = make(map[string]*subOp)
	}
	conn.barriers[id] = op
	n.enqueueLocked(conn, sendReq{kind: sendPing, name: id, op: op})
	return op
}

// pong confirms the barrier a PING answer names.
func (n *hub) pong(c *psConn, payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if op := c.barriers[payload]; op != nil {
		delete(c.barriers, payload)
		// A share that joined a subscription made already listens from
		// here: every message received from now on goes to its handler,
		// and those published before Redis processed the PING came first.
		// Before the gate opens, so that its Listen returns after.
		for _, m := range op.opens {
			if !m.gone && m.OnListening != nil {
				m.OnListening()
			}
		}
		for _, ch := range op.heard {
			st := n.chans[ch]
			if st == nil || st.conn != c || st.lastSub == nil || st.unsubs > 0 || c.heard[ch] {
				continue
			}
			c.heard[ch] = true
			for m := range n.handlers[ch] {
				if m.OnListening != nil {
					m.OnListening()
				}
			}
		}
		openTrackers(op)
		op.settle(nil)
	}
}

// releaseBarriersLocked fails every barrier of a connection that broke or
// closed with err: the PINGs are lost, and its waiters were woken to
// re-read; call with n.mu held.
func (c *psConn) releaseBarriersLocked(err error) {
	for id, op := range c.barriers {
		delete(c.barriers, id)
		op.settle(err)
	}
}
