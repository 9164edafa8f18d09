package cache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier owns one pub/sub connection per Cache and fans fill
// notifications out to the local waiters of each key. A key's channel is
// subscribed while it has waiters, and a waiter is told "ready" only once
// Redis confirmed its SUBSCRIBE, so a fill published after that cannot be
// missed by the waiter's next read.
type notifier struct {
	rdb redis.UniversalClient

	mu       sync.Mutex
	ps       *redis.PubSub
	chans    map[string]*channelState
	handlers map[string]func(payload string) // permanent subscriptions (L1 invalidation)
	// onReset runs after the connection broke: messages may have been missed.
	onReset func()
	// onListening runs when Redis confirms a permanent subscription, at
	// first and after every reconnect.
	onListening func()
	closed      bool
	stop        chan struct{} // closed by close
	done        chan struct{} // closed when receive returns
}

type channelState struct {
	waiters map[*waiter]struct{}
	// pending are the SUBSCRIBE/UNSUBSCRIBE commands sent and not yet
	// confirmed, oldest first; Redis confirms them in order.
	pending []*subOp
	// lastSub is the newest SUBSCRIBE when no UNSUBSCRIBE followed it.
	lastSub *subOp
}

type subOp struct {
	subscribe bool
	ready     chan struct{} // closed when confirmed (SUBSCRIBE only)
}

// wakeAll tells every waiter of the channel to re-read; call with n.mu held.
func (st *channelState) wakeAll() {
	for w := range st.waiters {
		select {
		case w.C <- struct{}{}:
		default:
		}
	}
}

// waiter is one local waiter's registration on a channel.
type waiter struct {
	n       *notifier
	channel string
	// C receives a value when a notification arrives (or the connection
	// broke and the key must be re-read).
	C chan struct{}
}

func newNotifier(rdb redis.UniversalClient) *notifier {
	return &notifier{rdb: rdb, chans: make(map[string]*channelState), stop: make(chan struct{})}
}

// subscribe registers a waiter on channel and waits, bounded by ctx, until
// Redis confirmed the subscription. On error the waiter is still registered
// (it may yet be woken) and must be closed; callers fall back to polling.
func (n *notifier) subscribe(ctx context.Context, channel string) (*waiter, error) {
	w := &waiter{n: n, channel: channel, C: make(chan struct{}, 1)}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return w, ErrClosed
	}
	if n.ps == nil {
		n.ps = n.rdb.Subscribe(context.WithoutCancel(ctx))
		n.done = make(chan struct{})
		go n.receive(n.ps, n.done)
	}
	st := n.chans[channel]
	if st == nil {
		st = &channelState{waiters: make(map[*waiter]struct{})}
		n.chans[channel] = st
	}
	st.waiters[w] = struct{}{}
	op := st.lastSub
	var err error
	if op == nil {
		op = &subOp{subscribe: true, ready: make(chan struct{})}
		st.pending = append(st.pending, op)
		st.lastSub = op
		// Sent under n.mu so the order of pending matches the wire order.
		err = n.ps.Subscribe(ctx, channel)
	}
	n.mu.Unlock()
	if err != nil {
		return w, err
	}
	select {
	case <-op.ready:
		return w, nil
	case <-ctx.Done():
		return w, context.Cause(ctx)
	}
}

// listen subscribes to channel for good and calls fn with every message's
// payload, on the receiving goroutine. It waits, bounded by ctx, for Redis
// to confirm.
func (n *notifier) listen(ctx context.Context, channel string, fn func(payload string)) error {
	n.mu.Lock()
	if n.handlers == nil {
		n.handlers = make(map[string]func(string))
	}
	n.handlers[channel] = fn
	n.mu.Unlock()
	_, err := n.subscribe(ctx, channel) // a waiter that is never closed
	return err
}

// close unregisters the waiter; the channel is unsubscribed when it was the last.
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
	if st.lastSub != nil && !n.closed {
		st.lastSub = nil
		st.pending = append(st.pending, &subOp{})
		if err := n.ps.Unsubscribe(context.Background(), w.channel); err != nil {
			// The connection broke; receive resets the queue on its error.
			st.pending = st.pending[:len(st.pending)-1]
		}
	}
	if len(st.pending) == 0 {
		delete(n.chans, w.channel)
	}
}

// receive reads the pub/sub connection until it is closed.
func (n *notifier) receive(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	ctx := context.Background()
	failures := 0
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed || errors.Is(err, redis.ErrClosed) {
				return
			}
			n.reset()
			failures++
			// go-redis reconnects and resubscribes on the next Receive; do
			// not spin while Redis is down.
			t := time.NewTimer(min(time.Duration(failures)*50*time.Millisecond, time.Second))
			select {
			case <-t.C:
			case <-n.stop:
				t.Stop()
				return
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			n.confirm(m.Channel)
		case *redis.Message:
			n.wake(m.Channel, m.Payload)
		}
	}
}

func (n *notifier) confirm(channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.handlers[channel] != nil && n.onListening != nil {
		n.onListening()
	}
	st := n.chans[channel]
	if st == nil || len(st.pending) == 0 {
		return // a resubscription after a reconnect: nothing waits on it
	}
	op := st.pending[0]
	st.pending[0] = nil
	st.pending = st.pending[1:]
	if op.subscribe {
		close(op.ready)
	}
	if len(st.waiters) == 0 && len(st.pending) == 0 && st.lastSub == nil {
		delete(n.chans, channel)
	}
}

func (n *notifier) wake(channel, payload string) {
	n.mu.Lock()
	handler := n.handlers[channel]
	n.mu.Unlock()
	if handler != nil {
		handler(payload)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if st := n.chans[channel]; st != nil {
		st.wakeAll()
	}
}

// reset runs after the connection broke: confirmations in flight are lost,
// and a fill may have been missed, so every waiter is released and woken to
// re-read (polling covers the gap until go-redis has resubscribed).
func (n *notifier) reset() {
	if n.onReset != nil {
		n.onReset()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch, st := range n.chans {
		for _, op := range st.pending {
			if op.subscribe {
				close(op.ready)
			}
		}
		st.pending = nil
		if st.lastSub != nil {
			// go-redis resubscribes it; treat it as confirmed from now on.
			st.lastSub = &subOp{subscribe: true, ready: closedChan}
		}
		st.wakeAll()
		if len(st.waiters) == 0 && st.lastSub == nil {
			delete(n.chans, ch)
		}
	}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// subscriptions returns the number of channels with state, for tests.
func (n *notifier) subscriptions() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.chans)
}

// close stops the receiver and closes the connection.
func (n *notifier) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	close(n.stop)
	ps, done := n.ps, n.done
	for _, st := range n.chans {
		st.wakeAll()
	}
	n.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}
