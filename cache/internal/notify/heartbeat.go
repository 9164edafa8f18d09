package notify

import (
	"strconv"
	"time"
)

// The heartbeat: PINGs sent in the background on the plain connection,
// whose answers tell each cache how recently everything published on its
// permanent subscriptions (the invalidation announcements) has been
// received. One heartbeat per client serves every share of its hub.
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
// for a client that talks to one Redis server: the cache does not use the
// heartbeat on a Cluster, a Ring or a Sentinel failover client, whose
// subscription may sit on another node than the commands.
//
// One PING, many shares. A PONG vouches for every channel subscribed on
// its socket before Redis processed the PING, whichever share listens on
// it: Redis writes the messages it published on them before that reply. So
// one heartbeat serves every share of the hub. When the PING is taken from
// the outbox (under the hub's lock, right before it is written), the
// heartbeat records, for each share with a heartbeat callback whose every
// permanent subscription is queued on the plain connection and confirmed
// on its current socket, the time on that share's own clock; a share whose
// subscription is not confirmed yet is left out of this beat. The answer,
// read in the same session, calls each recorded share's callback with its
// own time; its handlers were registered before the PING was taken, so
// every message received after that went to them, and those published
// before Redis processed the PING were received before the PONG. A share
// that closed meanwhile is not called. The heartbeat's period is the
// smallest any share asks for, and a Want from any share grants it credit.

// beatReg is a share's heartbeat: its period, the PINGs in a row without
// a Want after which it may stop, its clock and its callback.
type beatReg struct {
	every time.Duration
	idle  int
	clock func() int64
	fn    func(session uint64, sent int64)
}

// beat is a heartbeat PING taken from the outbox: the session then and, for
// each share it vouches for, the time on that share's clock before it was
// written.
type beat struct {
	session uint64
	sent    []shareTime
}

// shareTime is a share's clock reading for a beat.
type shareTime struct {
	n    *Notifier
	sent int64
}

// maxBeatsInFlight bounds the heartbeats sent and not answered: a
// connection that does not answer gets no pile of PINGs.
const maxBeatsInFlight = 4

// Session counts the breaks of the plain connection seen so far (starting
// at 1): it moves on before OnReset runs, and before anything else is read
// from or written to the plain connection after a break was seen. Every
// share of a hub sees the same session.
func (n *Notifier) Session() uint64 { return n.hub.sessionNow() }

func (n *hub) sessionNow() uint64 { return n.session.Load() + 1 }

// Heartbeat registers this share with the hub's heartbeat, which PINGs the
// plain connection every `every` (the smallest of the shares' periods)
// while it is wanted (Want, from any share), once this share's permanent
// subscriptions (Listen) are confirmed on it, until Close; fn is called
// with the session and the time on clock before the PING was written, for
// each answer read in the session it was sent in. fn runs on the receiving
// goroutine, after every message received before the answer was handed to
// its handler; it may be called after the session moved on and must
// check. Each PING goes out behind the subscriptions, or go-redis makes
// them again first on a new socket. A share registers once; later calls
// are ignored.
//
// The heartbeat is demand-driven and runs on credit: it starts stopped;
// Start, or a Want that comes from one to beatReach periods after the
// previous one, starts it with a PING at once; each period in which a Want came
// grants it beatGrant PINGs more, up to idle (idle < 1: one; with several
// shares, the longest of their idle spans), and it stops when it has sent
// what it was granted. Under steady wants it so runs on for idle PINGs
// after the last; a Want alone costs at most beatGrant PINGs, and a Want
// after a quiet spell none. An idle client sends nothing.
// Stopping loses nothing its answers proved: a PONG vouches for what was
// published on the connection before Redis processed the PING, in the
// session it was sent in, however long ago the previous one was; the trust
// it gives lapses on its own (the marks' Trust), and whoever needs it
// meanwhile reads the marks instead.
func (n *Notifier) Heartbeat(every time.Duration, idle int, clock func() int64, fn func(session uint64, sent int64)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.gone || n.beat != nil || every <= 0 {
		return
	}
	n.beat = &beatReg{every: every, idle: max(idle, 1), clock: clock, fn: fn}
	if n.beatStarted {
		return
	}
	n.beatStarted = true
	n.bg.Add(1)
	go n.heartbeat()
}

// beatPlan is the heartbeat's period, the smallest of the shares', and
// the PINGs in a row without a Want after which it stops, covering the
// longest of the shares' idle spans; every is 0 when no share beats.
func (n *hub) beatPlan() (every time.Duration, idle int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for m := range n.members {
		if m.beat != nil && (every == 0 || m.beat.every < every) {
			every = m.beat.every
		}
	}
	if every == 0 {
		return 0, 0
	}
	idle = 1
	for m := range n.members {
		if b := m.beat; b != nil {
			span := time.Duration(b.idle) * b.every
			idle = max(idle, int((span+every-1)/every))
		}
	}
	return every, idle
}

// beatGrant is how many PINGs each period in which a decision wanted the
// heartbeat (Want) grants it, up to the longest share's tail: a decision
// alone costs Redis at most beatGrant PINGs, while under steady wants
// (one a period) the grants outrun the PINGs and the tail builds up to
// its full length in tail/(beatGrant−1) periods. It is beatReach: a
// decision that comes within reach of the previous one (and so keeps the
// heartbeat going) finds it still running and its trust live, instead of
// stopped a grant too early and its own decision left to read the marks
// (with 4, misses 160 ms apart at a 40 ms round trip read them one time
// in two: TestRoundTripsAtADistanceWithDefaultOptions).
const beatGrant = beatReach

// beatReach is how many periods after a Want another may come and still
// start a stopped heartbeat; Wants less than a period apart count as one
// (a burst of decisions shows no rate). A Want that comes later, after a
// quiet spell, leaves it stopped: its decision reads the marks on its request path, and
// so would the next one, which comes later than beatGrant PINGs and their
// trust (4 periods at the cache's δ/4) could reach. With the cache's
// period of δ/4 it is 2δ.
const beatReach = 8

// heartbeat is the hub's heartbeat goroutine. It runs on credit: a start
// grants beatGrant PINGs, each period in which a Want came grants
// beatGrant more (up to the tail), each PING spends one, and it stops
// when none is left. A stopped heartbeat starts on a Start, or on a Want
// that comes from one to beatReach periods after the previous one.
func (n *hub) heartbeat() {
	defer n.bg.Done()
	t := time.NewTicker(time.Hour)
	t.Stop()
	var last time.Time // the latest Want seen (at the period it was seen in)
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
		forced := n.beatStart.Swap(false)
		every, tail := n.beatPlan()
		if every == 0 {
			continue // no share beats (any more)
		}
		// Wants less than a period apart (a burst of decisions, or
		// one on several caches) count as one, the first: they show
		// no rate.
		now := time.Now()
		gap := now.Sub(last)
		near := !last.IsZero() && gap >= every && gap < beatReach*every
		if last.IsZero() || gap >= every {
			last = now
		}
		if !forced && !near {
			continue // a decision after a quiet spell: it reads the marks
		}
		n.beating.Store(true)
		t.Reset(every)
		for credit := min(beatGrant, tail); credit > 0; {
			n.beatOnce()
			credit--
			select {
			case <-t.C:
			case <-n.life.Done():
				return
			}
			// Shares come and go: follow the smallest period.
			e, i := n.beatPlan()
			if e == 0 {
				break
			}
			if e != every {
				every = e
				t.Reset(every)
			}
			tail = i
			if n.beatWanted.Swap(false) {
				n.beatStart.Store(false) // a Start while it runs is a Want
				last = time.Now()
				credit = min(credit+min(beatGrant, tail), tail)
			}
		}
		t.Stop()
		n.beating.Store(false)
		// A Want after the last Swap either saw beating false and
		// queued a wake, or stored beatWanted before beating went
		// false and is seen here (both may happen; the extra wake
		// finds beatWanted taken and is dropped above). Its moment is
		// within a period of last, so it starts the heartbeat again.
		if n.beatWanted.Load() {
			select {
			case n.beatWake <- struct{}{}:
			default:
			}
		}
	}
}

// Want tells the heartbeat that a decision wants its answers. A running
// heartbeat is granted beatGrant more PINGs for each of its periods in
// which Want was called (by any share), up to the tail (see Heartbeat). A
// stopped one starts at once when the previous Want came from one to
// beatReach periods before (Wants less than a period apart count as one,
// the first); one that comes after a longer quiet spell leaves it stopped
// (its decision reads the marks instead) and only counts as the previous
// Want for the next. It costs an atomic load when
// called again before the heartbeat's next PING, so the hit path may call
// it.
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

// Start starts the heartbeat as a Want does, however long ago the
// previous Want came: for a new share, made to be used, whose first reads
// of what the heartbeat vouches for should come after an answer.
func (n *Notifier) Start() {
	n.beatStart.Store(true)
	n.beatWanted.Store(true)
	select {
	case n.beatWake <- struct{}{}:
	default:
	}
}

// Beating reports whether the client's heartbeat is running (wanted
// lately, by any share).
func (n *Notifier) Beating() bool { return n.beating.Load() }

// vouchableLocked reports whether a heartbeat PING taken now on c would
// vouch for m: m beats, and each of its permanent subscriptions is queued
// on c and confirmed on c's current socket since the last break seen (so
// no beat goes out while the connection is down, which the receiver,
// backing off, dials again, and a beat's answer is never the first thing a
// new socket says); call with n.mu held.
func (n *hub) vouchableLocked(m *Notifier, c *psConn) bool {
	if m.beat == nil || m.gone || len(m.listens) == 0 {
		return false
	}
	for _, ch := range m.listens {
		if st := n.chans[ch]; st == nil || st.conn != c || st.lastSub == nil || st.unsubs > 0 || !c.heard[ch] {
			return false
		}
	}
	return true
}

// beatOnce queues one heartbeat PING on the plain connection, if it exists,
// it would vouch for some share, and not too many are unanswered.
func (n *hub) beatOnce() {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.conns[""]
	if n.closed || c == nil || len(c.beats)+c.beatsQueued >= maxBeatsInFlight {
		return
	}
	for m := range n.members {
		if n.vouchableLocked(m, c) {
			n.barrierSeq++
			c.beatsQueued++
			n.enqueueLocked(c, sendReq{kind: sendBeat, name: "stampede-heartbeat-" + strconv.FormatUint(n.barrierSeq, 10)})
			return
		}
	}
}

// takeBeatLocked records a heartbeat PING about to be written, with the
// time on the clock of each share it vouches for; it reports false, and
// the PING is not sent, when it vouches for none; call with n.mu held.
func (n *hub) takeBeatLocked(c *psConn, id string) bool {
	c.beatsQueued--
	b := beat{session: n.sessionNow()}
	for m := range n.members {
		if n.vouchableLocked(m, c) {
			b.sent = append(b.sent, shareTime{n: m, sent: m.beat.clock()})
		}
	}
	if len(b.sent) == 0 {
		return false
	}
	if c.beats == nil {
		c.beats = make(map[string]beat)
	}
	c.beats[id] = b
	return true
}

// beatAnswered hands a heartbeat's answer to the callback of each share it
// vouches for, when it came in the session its PING was taken in; it
// reports whether payload was a heartbeat's.
func (n *hub) beatAnswered(c *psConn, payload string) bool {
	n.mu.Lock()
	b, ok := c.beats[payload]
	delete(c.beats, payload)
	var calls []shareTime
	for _, st := range b.sent {
		if !st.n.gone {
			calls = append(calls, st)
		}
	}
	n.mu.Unlock()
	if ok && b.session == n.sessionNow() {
		for _, st := range calls {
			st.n.beat.fn(b.session, st.sent)
		}
	}
	return ok
}
