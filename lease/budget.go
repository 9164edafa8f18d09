package lease

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A step is one script (or pipeline) sent to one Redis server: a Client's
// acquisition attempt, extension or release, or one server's part of a
// Quorum's round. Each is bounded by a budget and by the caller's context,
// whatever the go-redis client's own timeouts and retries are: go-redis
// ignores a context's deadline on socket reads and writes unless the client
// was built with ContextTimeoutEnabled (its ReadTimeout, 3 s by default,
// applies instead), and it re-dials a refused connection with backoff (a
// killed Redis cost an acquisition 1.7 s). So a step runs on a goroutine of
// its own, under a context bounded by the budget, and the caller stops
// waiting for it when the budget or its own context ends; the goroutine
// ends when go-redis gives up, and what it returns then is dropped. A
// failed dial of the step's client (a refused connection) ends the wait at
// once, with the dial's error (dial.go).

// maxDefaultBudget caps a step's default budget: an unreachable Redis costs
// a step at most this long unless RedisTimeout says otherwise.
const maxDefaultBudget = time.Second

// stepResult is what a step's goroutine hands back.
type stepResult[T any] struct {
	v   T
	err error
}

// serverStep runs call within budget d and ctx. When the budget ends first
// it returns an error matching [ErrRedisTimeout]; when ctx ends first,
// ctx's cause; when a dial of the client (l, nil for a Scripter without
// the hook) fails while it waits, the dial's error, at once (see dial.go).
// call must not touch the caller's variables: it returns what it read.
func serverStep[T any](ctx context.Context, d time.Duration, l *link, call func(context.Context) (T, error)) (T, error) {
	sctx, cancel := context.WithTimeout(ctx, d)
	// Cancelled once the caller has the reply or stopped waiting, so that
	// go-redis gives up what it can (a dial, a wait for a connection).
	defer cancel()
	v, err := watched(sctx, l, call)
	return v, explain(ctx, sctx, d, err)
}

// detached runs step under a context that keeps ctx's values but not its
// cancellation, bounded by d, and waits for it while ctx lasts: when ctx
// ends first, the caller goes on at once and the step goes on in the
// background to its own end, d later at the latest (step must honour its
// context, as [serverStep] and a Quorum's round do). It is how a failed
// acquisition gives back what it may have taken, so that a cancelled
// caller leaves nothing held, without outliving the caller's deadline.
func detached(ctx context.Context, d time.Duration, step func(ctx context.Context)) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		step(dctx)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// explain tells a step that ran out of its budget d (an [ErrRedisTimeout])
// from one whose caller's context ended (an error that matches the
// context's) and from the server's own errors.
func explain(ctx, sctx context.Context, d time.Duration, err error) error {
	switch {
	case err == nil || isReply(err):
		return err
	case ended(ctx):
		return callerEnded(ctx, err)
	case !ended(sctx):
		return err
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		// The budget's own deadline: nothing more to say, and it must not
		// pass for the caller's.
		return fmt.Errorf("%w (%s budget)", ErrRedisTimeout, d)
	}
	return fmt.Errorf("%w (%s budget): %w", ErrRedisTimeout, d, err)
}

// callerEnded is the error of a step that failed because the caller's
// context ended: one that matches the context's error, also where the
// client took the deadline to the socket and failed with an I/O timeout a
// moment before the context's own timer fired.
func callerEnded(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.DeadlineExceeded // the deadline passed; its timer has not fired yet
	}
	if errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w (%w)", cause, err)
}

// ended reports whether ctx is done or its deadline has passed: a client
// that takes the deadline to the socket may fail with an I/O timeout a
// moment before the context's own timer fires.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// isReply reports whether err is an error reply of a Redis server (it
// answered), rather than a failure to reach it.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// stepError describes a failed step of op on name with server: an
// [ErrUnavailable] unless the server answered or the caller's context ended.
func stepError(ctx context.Context, op, name, server string, err error) error {
	if !ended(ctx) && !isReply(err) {
		return fmt.Errorf("%w: %s %q on %s: %w", ErrUnavailable, op, name, server, err)
	}
	return fmt.Errorf("lease: %s %q on %s: %w", op, name, server, err)
}

// serverAddr names the server a go-redis client talks to, for errors.
func serverAddr(s redis.Scripter) string {
	switch c := s.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		addrs := make([]string, 0, len(c.Options().Addrs))
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		return strings.Join(addrs, ",")
	}
	return fmt.Sprintf("%T", s)
}
