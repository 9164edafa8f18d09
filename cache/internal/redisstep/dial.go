package redisstep

import (
	"time"

	"github.com/stampede-go/stampede/internal/dialwatch"
)

// A refused connection, an unknown host or a TLS handshake that fails is an
// outage known at once: the client's dial says so within a round trip. But
// go-redis hides it from the step that dialled: it dials again (5 times,
// 100 ms apart, by default) and retries the command (3 times, with
// backoff), and a step that waits for it would run out of its budget and
// be reported as a silent Redis (ErrRedisTimeout) that it was not. So a
// hook on the client (internal/dialwatch) tells the link of each failed dial at
// once, and a step of that client that is waiting with no reply from Redis
// since it began ends with the dial's own error ("dial tcp 127.0.0.1:1:
// connect: connection refused"), an outage that costs its caller (almost)
// no budget. Steps run on goroutines (which a failed dial can end) until
// Redis first answers and after a failed dial until its next reply; only a
// step already running inline when Redis starts refusing connections waits
// out its budget (see Run).

// dialFailed ends the current dial epoch with err as its cause: the steps
// waiting on it with no reply since they began end with err.
func (l *link) dialFailed(err error) {
	l.lastDialFail.Store(int64(time.Since(l.base)))
	l.epoch.Swap(dialwatch.NewEpoch()).End(err)
}

// dialCause is the failed dial that ended e while a step begun at start
// waited, with no step's reply since: the step's outcome. Nil otherwise.
func (h *redisHealth) dialCause(e *dialwatch.Epoch, start time.Time) error {
	if !e.Ended() || h.repliedSince(start) {
		return nil
	}
	return e.Cause()
}

// repliedSince reports whether a step's reply arrived at or after t.
func (h *redisHealth) repliedSince(t time.Time) bool {
	last := h.lastReply.Load()
	return last != 0 && last >= int64(t.Sub(h.base))
}

// dialSuspect reports whether no step's reply came yet, or a dial failed
// since the last one: a step then runs on a goroutine, whose wait a failed
// dial ends, not inline.
func (h *redisHealth) dialSuspect() bool {
	last := h.lastReply.Load()
	return last == 0 || h.lastDialFail.Load() >= last
}
