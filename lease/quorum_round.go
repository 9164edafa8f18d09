package lease

// One round of a Quorum: a step sent to its servers at once, the replies
// tallied until the outcome is known or the round's deadline passes, and
// the QuorumError of a step without a majority.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// QuorumError is returned when fewer than a majority of the servers could
// be reached for a step (errors.Is [ErrNoQuorum], and [ErrUnavailable] when
// no server answered at all); Unwrap gives each failed server's error,
// which names the server by its address and wraps the cause
// ([ErrRedisTimeout] for a server that did not answer in time).
type QuorumError struct {
	// Op is the step: "acquire", "fence", "extend" or "release".
	Op string
	// OK is how many servers did their part, Needed the majority, Of the
	// number of servers.
	OK, Needed, Of int
	// Answered is how many servers answered at all (yes, no, or an error
	// reply).
	Answered int
	// Errs are the failed servers' errors.
	Errs []error
}

// Error implements error.
func (e *QuorumError) Error() string {
	msg := fmt.Sprintf("%s: %s on %d of %d servers, %d needed", ErrNoQuorum, e.Op, e.OK, e.Of, e.Needed)
	if e.Answered == 0 {
		msg = ErrUnavailable.Error() + ", no server answered: " + strings.TrimPrefix(msg, "lease: ")
	}
	if len(e.Errs) > 0 {
		msg += ": " + errors.Join(e.Errs...).Error()
	}
	return msg
}

// Is reports whether target is [ErrNoQuorum], or [ErrUnavailable] when no
// server answered.
func (e *QuorumError) Is(target error) bool {
	return target == ErrNoQuorum || target == ErrUnavailable && e.Answered == 0
}

// Unwrap returns the failed servers' errors.
func (e *QuorumError) Unwrap() []error { return e.Errs }

// tally is one round's replies: which servers said yes or no, and which failed.
type tally struct {
	yes  []int   // indexes of the servers that answered yes
	vals []int64 // the second value of each yes (the fence floor), same order
	no   []int   // indexes of the servers that answered no (busy, or not ours)
	left int64   // the largest remaining TTL among the no answers, ms
	errs []error
	// replied is how many of errs are error replies: those servers
	// answered.
	replied int
	// restarted is how many servers said yes to a grant that did not
	// count: they restarted within the quarantine (their errors are in
	// errs).
	restarted int
	// flags and up are each server's third and fourth reply values, by
	// server index, where a reply had them (a grant's).
	flags, up map[int]int64
}

// round sends op's call to the servers at idx (all when idx is empty) at
// once and collects the replies until all came, the round's deadline
// passed, or (when decided is not nil) decided says the outcome is known:
// the calls still out then go on to their end, so that slow servers still
// take the step, and a dead minority does not cost every step the whole
// deadline. call returns {1, v, ...} for yes and {0, v, ...} for no.
func (q *Quorum) round(ctx context.Context, op, name string, idx []int, ttl time.Duration, decided func(tally) bool, call func(ctx context.Context, i int, rdb redis.Scripter) ([]int64, error)) tally {
	if len(idx) == 0 {
		idx = make([]int, len(q.servers))
		for i := range idx {
			idx[i] = i
		}
	}
	// The round's context keeps the caller's deadline and cancellation
	// while the round runs, but not after: calls still out when it returns
	// early must not be cut short when the caller cancels its context.
	budget := q.serverTimeout(ttl)
	timeout := budget
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	stop := context.AfterFunc(ctx, cancel)
	type reply struct {
		i   int
		res []int64
		err error
	}
	replies := make(chan reply, len(idx)) // buffered: a straggler never blocks
	// One goroutine per server, one server alone included, so that a
	// server that hangs past the deadline (a client that ignores context
	// deadlines, re-dials or retries) does not hold the round up; a server
	// whose dial fails meanwhile fails at once, with the dial's error
	// (see dial.go), so that refused masters cost the round nothing.
	for _, i := range idx {
		go func() {
			res, err := watched(rctx, q.dials[i], func(ctx context.Context) ([]int64, error) {
				return call(ctx, i, q.servers[i])
			})
			if err == nil && len(res) < 2 {
				err = fmt.Errorf("unexpected reply %v", res)
			}
			replies <- reply{i, res, err}
		}()
	}
	pending := len(idx)
	defer func() {
		if pending == 0 {
			stop()
			cancel()
			return
		}
		stop()
		go func() { // the calls still out end by the deadline at the latest
			for range pending {
				<-replies
			}
			cancel()
		}()
	}()
	answered := make([]bool, len(q.servers))
	var t tally
	fail := func(i int, err error) {
		err = fmt.Errorf("lease: %s %q on server %d (%s): %w", op, name, i, q.addrs[i], err)
		q.opts.observe(ctx, Event{Kind: EventRedisError, Name: name, Err: err})
		t.errs = append(t.errs, err)
	}
	for pending > 0 {
		if decided != nil && decided(t) {
			return t
		}
		var r reply
		select {
		case r = <-replies:
		case <-rctx.Done():
			// Each server still silent has failed: the caller's context
			// ended, or the server used up its budget.
			why := fmt.Errorf("%w (%s budget)", ErrRedisTimeout, budget)
			if ended(ctx) {
				why = context.Cause(ctx)
				if why == nil {
					why = context.DeadlineExceeded
				}
			}
			for _, i := range idx {
				if !answered[i] {
					fail(i, why)
				}
			}
			return t
		}
		pending--
		answered[r.i] = true
		switch {
		case r.err != nil:
			if isReply(r.err) {
				t.replied++
			}
			fail(r.i, explain(ctx, rctx, budget, r.err))
		case r.res[0] == 1:
			t.yes = append(t.yes, r.i)
			t.vals = append(t.vals, r.res[1])
		default:
			t.no = append(t.no, r.i)
			t.left = max(t.left, r.res[1])
		}
		if r.err == nil && len(r.res) >= 4 {
			if t.flags == nil {
				t.flags, t.up = map[int]int64{}, map[int]int64{}
			}
			t.flags[r.i], t.up[r.i] = r.res[2], r.res[3]
		}
	}
	return t
}

// yesNo is a round's call of a script that answers 1 (done) or 0 (the
// lease is not ours there).
func yesNo(script *redis.Script, keys []string, args ...any) func(context.Context, int, redis.Scripter) ([]int64, error) {
	return func(ctx context.Context, _ int, rdb redis.Scripter) ([]int64, error) {
		ok, err := script.Run(ctx, rdb, keys, args...).Int64()
		return []int64{ok, 0}, err
	}
}

// decided reports whether an extension's or a fence write-back's outcome
// is known: a majority said yes, or so many said no
// that no majority can.
func (q *Quorum) decided(t tally) bool {
	return len(t.yes) >= q.Majority() || len(t.no) > len(q.servers)-q.Majority()
}

func (t tally) quorumError(op string, needed, of int) error {
	answered := len(t.yes) + len(t.no) + t.replied + t.restarted
	return &QuorumError{Op: op, OK: len(t.yes), Needed: needed, Of: of, Answered: answered, Errs: t.errs}
}
