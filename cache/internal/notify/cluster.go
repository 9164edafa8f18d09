package notify

import (
	"context"
	"time"

	"github.com/stampede-go/stampede/cache/internal/retry"
)

// Sharded channels on a Redis Cluster: a connection that broke, or a slot
// that moved away, hands its channels to the resubscriber, which subscribes
// each again on the master that owns it now.

// dropLocked closes a sharded connection and hands its channels to the
// resubscriber; call with n.mu held.
func (n *hub) dropLocked(c *psConn) {
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

// loseLocked marks a sharded channel unsubscribed: its waiters re-read and
// poll, and the resubscriber subscribes it again on its current owner while
// it has waiters; call with n.mu held.
func (n *hub) loseLocked(channel string, st *channelState) {
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
func (n *hub) resubscriber() {
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
		if !retry.Sleep(n.life.Done(), retry.Backoff(failures+1)) {
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
func (n *hub) resubscribe(ctx context.Context, channel string) (*subOp, error) {
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
