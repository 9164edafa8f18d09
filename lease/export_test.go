package lease

import (
	"context"
	"time"
)

// SetQuorumClock makes q read the holder's time from now.
func SetQuorumClock(q *Quorum, now func() time.Time) { q.now = now }

// SetBetweenRounds makes q call hook between granting a lease and writing
// its fence back: where a holder can be paused.
func SetBetweenRounds(q *Quorum, hook func(ctx context.Context)) { q.betweenRounds = hook }
