package notify

import (
	"strconv"
	"time"
)

// The heartbeat: PINGs sent in the background on the plain connection,
// whose answers tell the cache how recently everything published on its
// permanent subscriptions (the invalidation announcements) has been
// received.
//
// Redis writes a connection's replies and its pushed messages in the order
// it produced them, so the PONG of a PING that Redis processed at t' comes
// after every message published on the connection's channels before t'.
// A PONG proves that only for the socket it came on: the heartbeat is
// credited only when no break was seen between the PING being taken from
// the outbox and its answer being read (the same session, see Session).
// A go-redis reconnect of the plain connection that comes with an error
// returned to the goroutine that caused it, the receiver or the sender,
// moves the session on (reset) before that goroutine reads or writes
// anything else; one that go-redis makes silently (an unusable connection,
// or a maintenance hand-off, redialled inside a call that then succeeds)
// resubscribes first on the new socket, and that second confirmation of a
// permanent subscription moves the session on (resubscribed, conn.go)
// before any PONG of the new socket is read. Either way a PONG read on a
// new socket answers a PING credited to a session that is no longer the
// one it was taken in, or one taken after the break was seen. This holds
// for a client that talks to one Redis server: New does not use the
// heartbeat on a Cluster, a Ring or a Sentinel failover client, whose
// subscription may sit on another node than the commands.

// beat is a heartbeat PING taken from the outbox: the session then and the
// time (on the heartbeat's clock) before it was written.
type beat struct {
	session uint64
	sent    int64
}

// maxBeatsInFlight bounds the heartbeats sent and not answered: a
// connection that does not answer gets no pile of PINGs.
const maxBeatsInFlight = 4

// Session counts the breaks of the plain connection seen so far (starting
// at 1): it moves on before OnReset runs, and before anything else is read
// from or written to the plain connection after a break was seen.
func (n *Notifier) Session() uint64 { return n.session.Load() + 1 }

// Heartbeat PINGs the plain connection every `every` while it is wanted
// (Want), once the permanent subscriptions (Listen) are queued on it, until
// Close; fn is called with the session and the time on clock before the
// PING was written, for each answer read in the session it was sent in.
// fn runs on the receiving goroutine, after every message received before
// the answer was handed to its handler; it may be called after the session
// moved on and must check. Each PING goes out behind the subscriptions, or
// go-redis makes them again first on a new socket.
//
// The heartbeat is demand-driven: it starts stopped, the first Want starts
// it with a PING at once, and it stops again after idle PINGs in a row
// with no Want between them (idle < 1: after one). An idle cache so sends
// nothing. Stopping loses nothing its answers proved: a PONG vouches for
// what was published on the connection before Redis processed the PING,
// in the session it was sent in, however long ago the previous one was;
// the trust it gives lapses on its own (the marks' Trust), and whoever
// needs it meanwhile reads the marks instead.
func (n *Notifier) Heartbeat(every time.Duration, idle int, clock func() int64, fn func(session uint64, sent int64)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.beatFn != nil {
		return
	}
	n.beatClock, n.beatFn = clock, fn
	idle = max(idle, 1)
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		t := time.NewTicker(every)
		t.Stop()
		for {
			// Stopped: wait for a Want.
			select {
			case <-n.beatWake:
			case <-n.life.Done():
				return
			}
			if !n.beatWanted.Swap(false) {
				continue // the Want that woke it was counted by a running heartbeat
			}
			n.beating.Store(true)
			t.Reset(every)
			for quiet := 0; quiet < idle; {
				n.beatOnce()
				select {
				case <-t.C:
				case <-n.life.Done():
					return
				}
				if n.beatWanted.Swap(false) {
					quiet = 0
				} else {
					quiet++
				}
			}
			t.Stop()
			n.beating.Store(false)
			// A Want after the last Swap either saw beating false and
			// queued a wake, or stored beatWanted before beating went
			// false and is seen here (both may happen; the extra wake
			// finds beatWanted taken and is dropped above).
			if n.beatWanted.Load() {
				select {
				case n.beatWake <- struct{}{}:
				default:
				}
			}
		}
	}()
}

// Want tells the heartbeat that a decision wants its answers: it starts at
// once when stopped, and keeps running while Want is called at least once
// in every idle PINGs (see Heartbeat). It costs an atomic load when called
// again before the heartbeat's next PING, so the hit path may call it.
func (n *Notifier) Want() {
	if n.beatWanted.Load() {
		return
	}
	n.beatWanted.Store(true)
	if !n.beating.Load() {
		select {
		case n.beatWake <- struct{}{}:
		default:
		}
	}
}

// Beating reports whether the heartbeat is running (wanted lately).
func (n *Notifier) Beating() bool { return n.beating.Load() }

// beatOnce queues one heartbeat PING on the plain connection, if it exists
// and not too many are unanswered.
func (n *Notifier) beatOnce() {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.conns[""]
	if n.closed || c == nil || len(n.handlers) == 0 || len(c.beats)+c.beatsQueued >= maxBeatsInFlight {
		return
	}
	for ch := range n.handlers {
		// Its SUBSCRIBE must be queued ahead (a waiter's Subscribe may
		// have made the connection first).
		if st := n.chans[ch]; st == nil || st.conn != c || st.lastSub == nil {
			return
		}
		// And confirmed on this socket since the last break seen: no
		// beat goes out while the connection is down (the receiver,
		// which backs off, dials it again), and a beat's answer is never
		// the first thing a new socket says.
		if !c.heard[ch] {
			return
		}
	}
	n.barrierSeq++
	c.beatsQueued++
	n.enqueueLocked(c, sendReq{kind: sendBeat, name: "stampede-heartbeat-" + strconv.FormatUint(n.barrierSeq, 10)})
}

// takeBeatLocked records a heartbeat PING about to be written; call with
// n.mu held.
func (n *Notifier) takeBeatLocked(c *psConn, id string) {
	c.beatsQueued--
	if c.beats == nil {
		c.beats = make(map[string]beat)
	}
	c.beats[id] = beat{session: n.session.Load() + 1, sent: n.beatClock()}
}

// beatAnswered hands a heartbeat's answer to fn when it came in the
// session its PING was taken in; it reports whether payload was a
// heartbeat's.
func (n *Notifier) beatAnswered(c *psConn, payload string) bool {
	n.mu.Lock()
	b, ok := c.beats[payload]
	delete(c.beats, payload)
	fn := n.beatFn
	n.mu.Unlock()
	if ok && fn != nil && b.session == n.Session() {
		fn(b.session, b.sent)
	}
	return ok
}
