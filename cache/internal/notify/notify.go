// Package notify is the cache's pub/sub: it subscribes a key's fill
// channel while local waiters wait on it or the cache's L1 tracks the key,
// and tells each of them when a notification arrives or the connection
// broke (so the key must be re-read).
// It speaks channels and payloads only; what a payload means is the
// caller's business.
//
// # One hub per client
//
// Every cache built on the same go-redis client (the same
// [redis.UniversalClient] value) shares one hub: one plain pub/sub
// connection (one sharded one per master on a Cluster) and one heartbeat,
// however many caches use the client (issue 38: what a process costs Redis
// must not grow with its number of caches). Each cache holds a [Notifier],
// its share of the hub: its waiters, its permanent subscriptions (Listen)
// and their handlers, its OnReset and OnListening, its heartbeat callback
// and that callback's clock. [New] takes a share, reference-counted by
// client; the Close of the last one closes the hub, its connections and
// its goroutines. Closing one share frees its waiters (their channels are
// unsubscribed when no other share's waiter is left on them) and forgets
// its handlers; the other shares' waiters, handlers and heartbeat go on
// undisturbed.
//
// Two shares may listen on the same channel (two caches of one namespace
// on one client): the channel is subscribed once and every share's
// handler gets each message. A share that listens on a channel the hub
// subscribed already is listening once a barrier PING queued behind its
// handler's registration is answered (Redis answers it after every
// message published before it processed the PING; every message received
// after the registration goes to the handler).
//
// The files split its jobs: this one holds the Notifier, the hub and their
// API (subscribe, listen, close); gate.go the channel states and the
// barriers that open a waiter to notifications; outbox.go the ordered
// sending of commands off the lock; conn.go a connection's receiver and
// what a break does; cluster.go the sharded channels that must move when
// a slot does; heartbeat.go the heartbeat and what its answers vouch for;
// track.go the trackers, a key's channel held for the cache's L1 with hooks
// for its opening, its messages and its breaks.
package notify

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Notifier is one cache's share of its client's hub: the pub/sub
// connections fan fill notifications out to the local waiters of each
// key. A key's channel is subscribed while it has waiters (of any share),
// and a waiter is told "ready" only once Redis answered a PING queued
// behind its subscription (its gate), so a fill published after that
// cannot be missed by the waiter's next read, and a notification received
// before it, possibly published before that read, never answers it.
//
// On a single Redis (or behind Sentinel) every channel shares one plain
// SUBSCRIBE connection, which go-redis reconnects and resubscribes. On a
// Redis Cluster the per-key channels use sharded pub/sub (SSUBSCRIBE): one
// connection per master, each channel on the master that owns its slot.
// Those connections are not left to go-redis's reconnect, which would send
// every channel in one SSUBSCRIBE (a CROSSSLOT error when they span slots)
// to a node that may no longer own them: when one breaks, or Redis moves a
// slot away (it then sends an unsolicited SUNSUBSCRIBE), the notifier wakes
// the waiters, drops the connection and subscribes each channel again, one
// by one, on its current owner. Polling covers the gap.
//
// OnReset and OnListening are set, if at all, before the first Subscribe
// or Listen.
type Notifier struct {
	*hub
	// gone: Close ran (under hub.mu); done is closed then.
	gone bool
	done chan struct{}
	// closedErr is what a Subscribe or Listen returns once Close ran.
	closedErr error
	// waiters are this share's registrations, Listen's included (under
	// hub.mu), which its Close frees.
	waiters map[*Waiter]struct{}
	// listens are the channels this share listens on (under hub.mu).
	listens []string
	// begun: a Subscribe or Listen of this share took hub.mu (under
	// hub.mu). Only then are its OnReset and OnListening read by the
	// hub's goroutines: its cache sets them after New made it a member of
	// a hub whose receiver may run already for the other shares.
	begun bool
	// beat is this share's heartbeat callback; nil: none (heartbeat.go).
	beat *beatReg
	// OnReset runs after the plain connection broke: notifications may
	// have been missed.
	OnReset func()
	// OnListening runs when Redis confirms a permanent subscription of
	// this share, at first and after every reconnect, or when this share
	// began listening on a channel that was subscribed already (see the
	// package doc); it may run more than once for one subscription.
	OnListening func()
}

// hub owns the pub/sub connections of one client, shared by its
// Notifiers.
type hub struct {
	rdb redis.UniversalClient
	// cluster is rdb when it is a Cluster client: per-key channels are sharded.
	cluster *redis.ClusterClient
	// refs counts the shares, under hubs' lock.
	refs int

	mu    sync.Mutex
	conns map[string]*psConn // "" is the plain connection; others by master address
	chans map[string]*channelState
	// handlers are the permanent subscriptions (L1 invalidation), by
	// channel, with each listening share's handler.
	handlers map[string]map[*Notifier]func(payload string)
	// members are the shares not closed.
	members map[*Notifier]struct{}
	// lost are sharded channels with waiters that must be subscribed again
	// on the master that owns them now.
	lost        map[string]struct{}
	kick        chan struct{} // wakes the resubscriber
	resubActive bool
	barrierSeq  uint64 // names the barriers' and heartbeats' PINGs
	// session counts the breaks of the plain connection seen (Session).
	session atomic.Uint64
	// beatStarted: the heartbeat's goroutine runs (heartbeat.go).
	beatStarted bool
	// beatWanted: a Want since the heartbeat's last PING; beatStart: a
	// Start not yet taken; beating: the heartbeat runs; beatWake wakes a
	// stopped one (heartbeat.go).
	beatWanted atomic.Bool
	beatStart  atomic.Bool
	beating    atomic.Bool
	beatWake   chan struct{}
	closed     bool
	life       context.Context // cancelled by close
	end        context.CancelFunc
	bg         sync.WaitGroup // the resubscriber and the heartbeat
	// wire are the goroutines that call into go-redis' PubSub: receivers,
	// senders and closers. close waits for them at most closeGrace, as one
	// of them may be inside a connection's handshake, which nothing can cut
	// short: it ends within go-redis' own DialTimeout and ReadTimeout.
	wire sync.WaitGroup
}

// hubs are the clients' hubs, while a Notifier uses them.
var hubs = struct {
	sync.Mutex
	m map[redis.UniversalClient]*hub
}{m: map[redis.UniversalClient]*hub{}}

// closeGrace bounds how long close waits for the goroutines that call into
// go-redis. They end in microseconds unless one is in a handshake with a
// Redis that does not answer; waiting for them otherwise means no goroutine
// of the notifier outlives Close, which goroutine-leak checks in users'
// tests rely on.
const closeGrace = 100 * time.Millisecond

// Waiter is one local waiter's registration on a channel.
type Waiter struct {
	n       *Notifier
	channel string
	// C receives a value when a notification arrives (or the connection
	// broke and the key must be re-read).
	C chan struct{}
	// last is the payload of the latest notification not yet taken (under
	// n.mu): a fill's or Set's envelope, or a marker.
	last string
	// gate is the subscription or barrier whose confirmation opens the
	// waiter to notifications (see wakeAll).
	gate *subOp
	// track is a tracker's hooks (track.go); nil for a waiter.
	track *Track
}

// Take returns the payload of the latest notification since the last Take
// and forgets it: "" when there is none, or when the notification may be
// older than the waiter's last read (see wakeAll).
func (w *Waiter) Take() string {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	p := w.last
	w.last = ""
	return p
}

// New returns a share of rdb's hub, making the hub for the first share.
// Once closed, its Subscribe and Listen return closed (the cache's own
// ErrClosed), and so does a subscription that Close interrupted.
func New(rdb redis.UniversalClient, closed error) *Notifier {
	hubs.Lock()
	defer hubs.Unlock()
	h := hubs.m[rdb]
	if h == nil {
		h = newHub(rdb)
		hubs.m[rdb] = h
	}
	h.refs++
	n := &Notifier{hub: h, done: make(chan struct{}), closedErr: closed, waiters: make(map[*Waiter]struct{})}
	h.mu.Lock()
	h.members[n] = struct{}{}
	h.mu.Unlock()
	return n
}

func newHub(rdb redis.UniversalClient) *hub {
	cc, _ := rdb.(*redis.ClusterClient)
	life, end := context.WithCancel(context.Background())
	return &hub{
		rdb: rdb, cluster: cc,
		conns: make(map[string]*psConn), chans: make(map[string]*channelState),
		handlers: make(map[string]map[*Notifier]func(string)), members: make(map[*Notifier]struct{}),
		lost: make(map[string]struct{}), kick: make(chan struct{}, 1), beatWake: make(chan struct{}, 1),
		life: life, end: end,
	}
}

// Sharded reports whether per-key channels use SSUBSCRIBE (and so must be
// announced with SPUBLISH): the client is a Cluster client.
func (n *Notifier) Sharded() bool { return n.cluster != nil }

// Subscribe registers a waiter on a per-key channel and waits, bounded by
// ctx, until Redis confirmed the subscription. On error the waiter is still
// registered (it may yet be woken) and must be closed; callers fall back to
// polling.
func (n *Notifier) Subscribe(ctx context.Context, channel string) (*Waiter, error) {
	return n.join(ctx, channel, n.Sharded(), false, nil)
}

// join registers a waiter of n on channel and waits for its gate; a
// listening join runs n's OnListening when its gate opens. A tracker's
// join (t not nil) does not wait: its hooks hear when the gate opens.
func (n *Notifier) join(ctx context.Context, channel string, sharded, listening bool, t *Track) (*Waiter, error) {
	w := &Waiter{n: n, channel: channel, C: make(chan struct{}, 1), track: t}
	var node *redis.Client
	var lookupErr error
	if sharded {
		node, lookupErr = n.cluster.MasterForKey(ctx, channel)
	}
	n.mu.Lock()
	if n.closed || n.gone {
		n.mu.Unlock()
		return w, n.closedErr
	}
	n.begun = true
	st := n.chans[channel]
	if st == nil {
		st = &channelState{waiters: make(map[*Waiter]struct{})}
		n.chans[channel] = st
	}
	st.waiters[w] = struct{}{}
	n.waiters[w] = struct{}{}
	op := st.lastSub
	switch {
	case op != nil && !op.settled() && !op.sent:
		// Subscribing, its barrier still queued: its answer opens this
		// waiter too.
	case op != nil:
		// Subscribed already (or subscribing, its barrier sent):
		// notifications published before this waiter's re-read may still
		// be on their way. A PING on the connection is answered after
		// them: the waiter hears only what follows it.
		op = n.barrierLocked(st.conn)
	case lookupErr != nil:
		n.loseLocked(channel, st)
		op = newSubOp()
		op.settle(lookupErr) // never opens: the waiter re-reads and polls
	default:
		op = n.sendLocked(channel, st, node)
	}
	if listening {
		op.opens = append(op.opens, n)
	}
	if t != nil && w.gate != op {
		op.tracks = append(op.tracks, w)
	}
	w.gate = op
	n.mu.Unlock()
	if t != nil {
		return w, nil
	}
	// The commands go out on the connection's sender (outbox.go), never
	// under n.mu: a connection's first command dials and handshakes, which
	// against a Redis that does not answer lasts go-redis' own timeouts.
	select {
	case <-op.ready:
		select {
		case <-n.done:
			return w, n.closedErr
		default:
		}
		return w, op.err
	case <-n.done:
		return w, n.closedErr
	case <-ctx.Done():
		return w, context.Cause(ctx)
	}
}

// Listen subscribes to a plain channel for good (until Close) and calls
// fn with every message's payload, on the receiving goroutine. It waits,
// bounded by ctx, for Redis to confirm. The L1 invalidation channel is
// plain even on a Cluster: one PUBLISH reaches every node's subscribers.
func (n *Notifier) Listen(ctx context.Context, channel string, fn func(payload string)) error {
	n.mu.Lock()
	if n.closed || n.gone {
		n.mu.Unlock()
		return n.closedErr
	}
	fns := n.handlers[channel]
	if fns == nil {
		fns = make(map[*Notifier]func(string))
		n.handlers[channel] = fns
	}
	fns[n] = fn
	n.listens = append(n.listens, channel)
	n.mu.Unlock()
	_, err := n.join(ctx, channel, false, true, nil) // a waiter that Close frees
	return err
}

// Close ends w's registration: the channel is unsubscribed once it has no
// waiters left.
func (w *Waiter) Close() {
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	n.leaveLocked(w)
}

// leaveLocked ends w's registration, unsubscribing its channel once no
// waiter is left on it; call with n.mu held.
func (n *hub) leaveLocked(w *Waiter) {
	delete(w.n.waiters, w)
	st := n.chans[w.channel]
	if st == nil {
		return
	}
	if _, ok := st.waiters[w]; !ok {
		return // left already (its share closed)
	}
	delete(st.waiters, w)
	if len(st.waiters) > 0 {
		return
	}
	delete(n.lost, w.channel)
	if st.lastSub != nil && !n.closed {
		st.lastSub = nil
		st.unsubs++
		n.enqueueLocked(st.conn, sendReq{kind: sendUnsubscribe, name: w.channel})
	}
	n.tidyLocked(w.channel, st)
}

// Subscriptions returns the number of channels with state in the client's
// hub (every share's): those with waiters, and those whose unsubscribe
// Redis has not confirmed yet. The cache's tests read it to see that
// subscriptions are released.
func (n *Notifier) Subscriptions() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.chans)
}

// Close ends this share: a Subscribe or Listen in progress returns
// closedErr, every waiter of the share is woken (to re-read) and freed,
// its handlers are forgotten and its heartbeat callback is not called
// again; a channel none of the other shares waits on is unsubscribed. The
// last share's Close also closes the hub: it stops the receivers, the
// senders, the resubscriber and the heartbeat and closes the connections,
// waiting at most closeGrace for those caught in a handshake with a Redis
// that does not answer.
func (n *Notifier) Close() error {
	n.mu.Lock()
	if n.gone {
		n.mu.Unlock()
		return nil
	}
	n.gone = true
	close(n.done)
	delete(n.members, n)
	for _, ch := range n.listens {
		if fns := n.handlers[ch]; fns != nil {
			delete(fns, n)
			if len(fns) == 0 {
				delete(n.handlers, ch)
			}
		}
	}
	for w := range n.waiters {
		if st := n.chans[w.channel]; st != nil {
			if _, ok := st.waiters[w]; ok {
				w.last = ""
				select {
				case w.C <- struct{}{}:
				default:
				}
			}
		}
		n.leaveLocked(w)
	}
	n.mu.Unlock()
	hubs.Lock()
	h := n.hub
	last := false
	if h.refs--; h.refs <= 0 {
		last = true
		if hubs.m[h.rdb] == h {
			delete(hubs.m, h.rdb)
		}
	}
	hubs.Unlock()
	if last {
		h.close()
	}
	return nil
}

// close stops the receivers, the senders, the resubscriber and the
// heartbeat, frees every waiter and closes the connections. It waits at
// most closeGrace for those caught in a handshake with a Redis that does
// not answer.
func (n *hub) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	n.end()
	for _, c := range n.conns {
		c.releaseBarriersLocked(errPubSubLost) // a sender drops its outbox once it sees closed
		n.closeConn(c)
	}
	for _, st := range n.chans {
		st.release(errPubSubLost)
	}
	n.mu.Unlock()
	n.bg.Wait()
	_ = waitAtMost(&n.wire, closeGrace)
}

// waitAtMost waits for wg, at most d, and reports whether wg finished.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
