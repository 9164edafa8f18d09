package cache

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier owns the pub/sub connections of one Cache and fans fill
// notifications out to the local waiters of each key. A key's channel is
// subscribed while it has waiters, and a waiter is told "ready" only once
// Redis answered a PING queued behind its subscription (its gate), so a
// fill published after that cannot be missed by the waiter's next read,
// and a notification received before it, possibly published before that
// read, never answers it.
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
type notifier struct {
	rdb redis.UniversalClient
	// cluster is rdb when it is a Cluster client: per-key channels are sharded.
	cluster *redis.ClusterClient

	mu       sync.Mutex
	conns    map[string]*psConn // "" is the plain connection; others by master address
	chans    map[string]*channelState
	handlers map[string]func(payload string) // permanent subscriptions (L1 invalidation)
	// lost are sharded channels with waiters that must be subscribed again
	// on the master that owns them now.
	lost        map[string]struct{}
	kick        chan struct{} // wakes the resubscriber
	resubActive bool
	barrierSeq  uint64 // names the barriers' PINGs
	// onReset runs after the plain connection broke: messages may have been missed.
	onReset func()
	// onListening runs when Redis confirms a permanent subscription, at
	// first and after every reconnect.
	onListening func()
	closed      bool
	life        context.Context // cancelled by close
	end         context.CancelFunc
	bg          sync.WaitGroup // the resubscriber
	// wire are the goroutines that call into go-redis' PubSub: receivers,
	// senders and closers. close waits for them at most closeGrace, as one
	// of them may be inside a connection's handshake, which nothing can cut
	// short: it ends within go-redis' own DialTimeout and ReadTimeout.
	wire sync.WaitGroup
}

// closeGrace bounds how long close waits for the goroutines that call into
// go-redis. They end in microseconds unless one is in a handshake with a
// Redis that does not answer; waiting for them otherwise means no goroutine
// of the notifier outlives Close, which goroutine-leak checks in users'
// tests rely on.
const closeGrace = 100 * time.Millisecond

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

type channelState struct {
	// conn carries the channel's subscription; nil while it has none.
	conn    *psConn
	waiters map[*waiter]struct{}
	// unsubs counts the (S)UNSUBSCRIBEs queued on conn and not yet
	// confirmed: an unsubscribe confirmation beyond them (sharded) is Redis
	// moving the slot away.
	unsubs int
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
}

// tidyLocked forgets channel's state once nothing refers to it; call with
// n.mu held.
func (n *notifier) tidyLocked(channel string, st *channelState) {
	if len(st.waiters) == 0 && st.unsubs == 0 && st.lastSub == nil {
		delete(n.chans, channel)
	}
}

// waiter is one local waiter's registration on a channel.
type waiter struct {
	n       *notifier
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
}

// take returns the payload of the latest notification since the last take
// and forgets it.
func (w *waiter) take() string {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	p := w.last
	w.last = ""
	return p
}

func newNotifier(rdb redis.UniversalClient) *notifier {
	cc, _ := rdb.(*redis.ClusterClient)
	life, end := context.WithCancel(context.Background())
	return &notifier{
		rdb: rdb, cluster: cc,
		conns: make(map[string]*psConn), chans: make(map[string]*channelState),
		lost: make(map[string]struct{}), kick: make(chan struct{}, 1),
		life: life, end: end,
	}
}

// sharded reports whether per-key channels use SSUBSCRIBE/SPUBLISH.
func (n *notifier) sharded() bool { return n.cluster != nil }

// subscribe registers a waiter on a per-key channel and waits, bounded by
// ctx, until Redis confirmed the subscription. On error the waiter is still
// registered (it may yet be woken) and must be closed; callers fall back to
// polling.
func (n *notifier) subscribe(ctx context.Context, channel string) (*waiter, error) {
	return n.join(ctx, channel, n.sharded())
}

func (n *notifier) join(ctx context.Context, channel string, sharded bool) (*waiter, error) {
	w := &waiter{n: n, channel: channel, C: make(chan struct{}, 1)}
	var node *redis.Client
	var lookupErr error
	if sharded {
		node, lookupErr = n.cluster.MasterForKey(ctx, channel)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return w, ErrClosed
	}
	st := n.chans[channel]
	if st == nil {
		st = &channelState{waiters: make(map[*waiter]struct{})}
		n.chans[channel] = st
	}
	st.waiters[w] = struct{}{}
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
	w.gate = op
	n.mu.Unlock()
	// The commands go out on the connection's sender (outbox.go), never
	// under n.mu: a connection's first command dials and handshakes, which
	// against a Redis that does not answer lasts go-redis' own timeouts.
	select {
	case <-op.ready:
		return w, op.err
	case <-ctx.Done():
		return w, context.Cause(ctx)
	}
}

// sendLocked queues the subscription of channel on its connection (node's
// sharded one, or the plain one when node is nil), and the barrier that
// confirms it, which it returns; call with n.mu held.
//
// Confirmations are not matched to the (S)SUBSCRIBE itself: go-redis
// resubscribes on its own after a reconnect, and those confirmations look
// the same. The PONG of a PING with a payload of its own cannot be mistaken.
func (n *notifier) sendLocked(channel string, st *channelState, node *redis.Client) *subOp {
	conn := n.connLocked(node)
	if st.conn != conn {
		st.unsubs = 0 // those were queued on another connection
	}
	st.conn = conn
	delete(n.lost, channel)
	n.enqueueLocked(conn, sendReq{kind: sendSubscribe, name: channel})
	st.lastSub = n.barrierLocked(conn)
	return st.lastSub
}

// barrierLocked queues a PING on conn and returns the barrier its answer
// confirms; call with n.mu held.
func (n *notifier) barrierLocked(conn *psConn) *subOp {
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
func (n *notifier) pong(c *psConn, payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if op := c.barriers[payload]; op != nil {
		delete(c.barriers, payload)
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

// connLocked returns the connection for node (nil: the plain one), making
// it and its receiver on first use; call with n.mu held.
func (n *notifier) connLocked(node *redis.Client) *psConn {
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

// listen subscribes to a plain channel for good and calls fn with every
// message's payload, on the receiving goroutine. It waits, bounded by ctx,
// for Redis to confirm. The L1 invalidation channel is plain even on a
// Cluster: one PUBLISH reaches every node's subscribers.
func (n *notifier) listen(ctx context.Context, channel string, fn func(payload string)) error {
	n.mu.Lock()
	if n.handlers == nil {
		n.handlers = make(map[string]func(string))
	}
	n.handlers[channel] = fn
	n.mu.Unlock()
	_, err := n.join(ctx, channel, false) // a waiter that is never closed
	return err
}

// ready implements [subscription].
func (w *waiter) ready() <-chan struct{} { return w.C }

// close implements [subscription]: the channel is unsubscribed once it has
// no waiters left.
func (w *waiter) close() {
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.chans[w.channel]
	if st == nil {
		return
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

// receive reads one pub/sub connection until it is closed or dropped.
func (n *notifier) receive(c *psConn) {
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
			if !sleep(n.life.Done(), backoff(failures)) {
				return
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			n.confirm(c, m.Kind, m.Channel)
		case *redis.Message:
			n.wake(c, m.Channel, m.Payload)
		case *redis.Pong:
			n.pong(c, m.Payload)
		}
	}
}

// backoff is the pause after failures failures in a row: 50 ms more per
// failure, at most 1 s.
func backoff(failures int) time.Duration {
	return min(time.Duration(failures)*50*time.Millisecond, time.Second)
}

// sleep waits d; it reports false when done closed meanwhile.
func sleep(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

func (n *notifier) confirm(c *psConn, kind, channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.handlers[channel] != nil && n.onListening != nil {
		n.onListening()
	}
	st := n.chans[channel]
	if st == nil || st.conn != c {
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

// wake hands a notification received on c to its channel's waiters; one
// from a connection the channel has left (its slot moved) was published
// before the subscription that replaced it, and is dropped.
func (n *notifier) wake(c *psConn, channel, payload string) {
	n.mu.Lock()
	handler := n.handlers[channel]
	n.mu.Unlock()
	if handler != nil {
		handler(payload)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if st := n.chans[channel]; st != nil && st.conn == c {
		st.wakeAll(payload)
	}
}

// reset runs after the plain connection broke, seen by the receiver or by
// a command that failed (go-redis may have replaced the socket inside it):
// confirmations in flight are lost, and a fill may have been missed, so
// every waiter is released and woken to re-read (polling covers the gap
// until go-redis has resubscribed).
func (n *notifier) reset(c *psConn) {
	if n.onReset != nil {
		n.onReset()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	c.releaseBarriersLocked(errPubSubLost)
	for ch, st := range n.chans {
		if st.conn != c {
			continue
		}
		st.release(errPubSubLost)
		if st.lastSub != nil {
			st.lastSub = resubscribed
		}
		n.tidyLocked(ch, st)
	}
}

// resubscribed stands for a plain subscription that go-redis makes again
// on its next connection (it keeps the channels it was asked for): later
// waiters take a barrier behind it, sent on that connection after the
// resubscription.
var resubscribed = func() *subOp { op := newSubOp(); op.settle(nil); return op }()

// dropLocked closes a sharded connection and hands its channels to the
// resubscriber; call with n.mu held.
func (n *notifier) dropLocked(c *psConn) {
	if c.dead {
		return
	}
	c.dead = true
	delete(n.conns, c.addr)
	c.releaseBarriersLocked(errPubSubLost)
	for ch, st := range n.chans {
		if st.conn == c {
			n.loseLocked(ch, st)
		}
	}
	// Closing only fails the blocked Receive, which then sees c.dead. Not
	// under n.mu: closing waits for go-redis' own reconnect attempt.
	n.closeConn(c)
}

// closeConn closes c's PubSub on a goroutine of its own: go-redis holds
// the PubSub's lock through a handshake, and Close takes it.
func (n *notifier) closeConn(c *psConn) {
	n.wire.Add(1)
	go func() {
		defer n.wire.Done()
		_ = c.ps.Close()
	}()
}

// loseLocked marks a sharded channel unsubscribed: its waiters re-read and
// poll, and the resubscriber subscribes it again on its current owner while
// it has waiters; call with n.mu held.
func (n *notifier) loseLocked(channel string, st *channelState) {
	st.release(errPubSubLost)
	st.conn, st.lastSub = nil, nil
	if len(st.waiters) == 0 {
		delete(n.chans, channel)
		return
	}
	n.lost[channel] = struct{}{}
	if !n.resubActive && !n.closed {
		n.resubActive = true
		n.bg.Add(1)
		go n.resubscriber()
	}
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// resubscriber subscribes lost sharded channels again on their current
// masters, with backoff while the cluster is failing over or resharding.
func (n *notifier) resubscriber() {
	defer n.bg.Done()
	failures := 0
	for {
		if failures == 0 {
			select {
			case <-n.kick:
			case <-n.life.Done():
				return
			}
		}
		// The slot map may be stale: a master died or a slot moved.
		n.cluster.ReloadState(n.life)
		if !sleep(n.life.Done(), backoff(failures+1)) {
			return
		}
		n.mu.Lock()
		lost := make([]string, 0, len(n.lost))
		for ch := range n.lost {
			lost = append(lost, ch)
		}
		n.mu.Unlock()
		// Subscribe them all, then wait for the confirmations together.
		ctx, cancel := context.WithTimeout(n.life, time.Second)
		failed := false
		var ops []*subOp
		for _, ch := range lost {
			op, err := n.resubscribe(ctx, ch)
			if err != nil {
				failed = true
			} else if op != nil {
				ops = append(ops, op)
			}
		}
		for _, op := range ops {
			select {
			case <-op.ready:
				failed = failed || op.err != nil
			case <-ctx.Done():
				failed = true
			}
		}
		cancel()
		if failed {
			failures++
		} else {
			failures = 0
		}
	}
}

// resubscribe queues the subscription of one lost channel on its current
// master and returns it (nil: the channel is no longer lost). Nobody else
// waits on it: the waiters poll meanwhile.
func (n *notifier) resubscribe(ctx context.Context, channel string) (*subOp, error) {
	node, err := n.cluster.MasterForKey(ctx, channel)
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.chans[channel]
	if _, ok := n.lost[channel]; !ok || n.closed || st == nil || st.conn != nil {
		return nil, nil // no longer lost: gone, closed or subscribed anew
	}
	if err != nil {
		return nil, err
	}
	return n.sendLocked(channel, st, node), nil
}

// subscriptions returns the number of channels with state, for tests.
func (n *notifier) subscriptions() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.chans)
}

// close stops the receivers, the senders and the resubscriber, frees every
// waiter and closes the connections. It waits at most closeGrace for those
// caught in a handshake with a Redis that does not answer.
func (n *notifier) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.end()
	for _, c := range n.conns {
		c.releaseBarriersLocked(ErrClosed) // a sender drops its outbox once it sees closed
		n.closeConn(c)
	}
	for _, st := range n.chans {
		st.release(ErrClosed)
	}
	n.mu.Unlock()
	n.bg.Wait()
	_ = waitAtMost(&n.wire, closeGrace)
	return nil
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
