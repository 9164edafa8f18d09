package notify

import "context"

// Trackers: a key's channel subscribed for as long as its owner keeps it
// (the cache's L1 holds the key), with hooks instead of a channel to wait
// on. A tracker is a waiter of the channel that is never woken: it shares
// the channel's subscription, gates and breaks with the other waiters, and
// its hooks say what a waiter's wake-up would.
//
// A tracker is open from the moment Redis answered its gate (the barrier
// PING behind its subscription) until the connection carrying the
// subscription breaks or the slot moves: while it is open, every message
// published on the channel after a read that began once it was open
// reaches Message. A break calls Lost, and the next subscription of the
// channel (go-redis' resubscription on the plain connection, the
// resubscriber's on a Cluster) brings a new gate whose answer calls Opened
// again.

// Track is what a tracker's owner hears. Opened and Lost run with the
// hub's lock held: they must not call the notifier, and must not wait for
// anything that does.
type Track struct {
	// Opened: Redis answered the tracker's gate; every message published
	// after a read the owner begins from now on reaches Message.
	Opened func()
	// Message is a message received on the channel while the tracker is
	// open, on the connection's receiving goroutine, in order, off the
	// hub's lock.
	Message func(payload string)
	// Lost: the subscription broke (messages may be lost) until Opened
	// runs again.
	Lost func()
}

// Track registers a tracker on a key's channel and queues its subscription
// (sharded on a Cluster) without waiting for Redis: t.Opened runs once
// Redis confirmed it. ctx bounds only the lookup of a Cluster slot's
// master. Close the returned waiter to end it; its channel is
// unsubscribed once no waiter is left on it.
func (n *Notifier) Track(ctx context.Context, channel string, t *Track) (*Waiter, error) {
	return n.join(ctx, channel, n.Sharded(), false, t)
}

// regateTrackers makes op the gate of every tracker of the channel: a new
// subscription of the channel, whose answer opens them; call with n.mu
// held.
func (st *channelState) regateTrackers(op *subOp) {
	for w := range st.waiters {
		if w.track != nil && w.gate != op {
			w.gate = op
			op.tracks = append(op.tracks, w)
		}
	}
}

// openTrackers runs Opened for the trackers op opens, those still
// registered whose gate op still is; call with n.mu held, before op
// settles.
func openTrackers(op *subOp) {
	for _, w := range op.tracks {
		if w.gate == op && w.registered() && w.track.Opened != nil {
			w.track.Opened()
		}
	}
	op.tracks = nil
}

// loseTrackers runs Lost for every tracker of a channel whose subscription
// broke; call with n.mu held.
func (st *channelState) loseTrackers() {
	for w := range st.waiters {
		if w.track != nil && w.track.Lost != nil {
			w.track.Lost()
		}
	}
}

// registered reports whether w is still one of its channel's waiters; call
// with n.mu held.
func (w *Waiter) registered() bool {
	st := w.n.chans[w.channel]
	if st == nil {
		return false
	}
	_, ok := st.waiters[w]
	return ok
}

// openTrackersOf appends the Message hooks of the channel's open trackers
// to fns; call with n.mu held.
func (st *channelState) openTrackersOf(fns []func(string)) []func(string) {
	for w := range st.waiters {
		if w.track != nil && w.track.Message != nil && w.gate.opened() {
			fns = append(fns, w.track.Message)
		}
	}
	return fns
}

// regateAfterReset gives the trackers of c's channels a barrier queued
// behind go-redis' resubscription on its next socket: its answer opens
// them again; call with n.mu held.
func (n *hub) regateAfterReset(c *psConn) {
	var op *subOp
	for _, st := range n.chans {
		if st.conn != c || st.lastSub == nil {
			continue
		}
		for w := range st.waiters {
			if w.track == nil {
				continue
			}
			if op == nil {
				op = n.barrierLocked(c)
			}
			st.regateTrackers(op)
			break
		}
	}
}
