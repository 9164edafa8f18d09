package lease

import (
	"context"
	"time"
)

// RunKey is the key where a server records its run_id when it takes part
// in a quorum's fenced lease on name (quorum_fence.lua).
func RunKey(name string) string { return runKey(name) }

// SetClientClock makes c read the holder's time from now.
func SetClientClock(c *Client, now func() time.Time) { c.clock = now }

// SetQuorumClock makes q read the holder's time from now.
func SetQuorumClock(q *Quorum, now func() time.Time) { q.clock = now }

// SetBetweenRounds makes q call hook between granting a lease and writing
// its fence back: where a holder can be paused.
func SetBetweenRounds(q *Quorum, hook func(ctx context.Context)) {
	q.afterGrant = func(ctx context.Context, granted bool) {
		if granted {
			hook(ctx)
		}
	}
}

// SetAfterFailedGrant makes q call hook after a grant round that did not
// win the lease, before the attempt releases what it took.
func SetAfterFailedGrant(q *Quorum, hook func(ctx context.Context)) {
	q.afterGrant = func(ctx context.Context, granted bool) {
		if !granted {
			hook(ctx)
		}
	}
}

// SetElectionClock makes e's RunEvery read the time from now and wait with
// after.
func SetElectionClock(e *Election, now func() time.Time, after func(time.Duration) <-chan time.Time) {
	e.now, e.after = now, after
}

// DialWatch is the link through which c's steps learn of its client's
// failed dials: nil for a Scripter the hook cannot be added to.
func DialWatch(c *Client) any {
	if c.dial == nil {
		return nil
	}
	return c.dial
}
