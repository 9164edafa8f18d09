package cache

import (
	"context"
	"errors"
	"fmt"

	"github.com/stampede-go/stampede/singleflight"
)

// Errors returned by this package, wrapped with context; test with errors.Is.
var (
	// ErrInvalidKey means the key is empty or longer than Options.MaxKeyBytes.
	ErrInvalidKey = errors.New("cache: invalid key")
	// ErrNilFunc means a nil compute function was passed.
	ErrNilFunc = errors.New("cache: nil compute function")
	// ErrInvalidOptions means [Options] failed validation in [New].
	ErrInvalidOptions = errors.New("cache: invalid options")
	// ErrValueTooLarge means the encoded value exceeds Options.MaxValueBytes,
	// or, in the process-local store, the entry weighs more than
	// Options.MaxLocalBytes/16 (see [Weigher]). Set returns it; a computed
	// value that is too large is returned without error, with Result.Err
	// matching it, and counted in Stats().Unstored.
	ErrValueTooLarge = errors.New("cache: value too large")
	// ErrLeaseBusy means another replica kept computing the key past
	// WaitTimeout and the contention policy is [BusyError].
	ErrLeaseBusy = errors.New("cache: another replica is computing this key (wait timed out)")
	// ErrUnavailable means Redis did not serve the call: it is known to be
	// down (the circuit breaker is open: Get, Set and Delete return it at
	// once instead of paying a Redis timeout), or one of the call's Redis
	// steps failed while the caller's context was alive (a refused or reset
	// connection, a step past RedisTimeout, which also matches
	// [ErrRedisTimeout]). A Set, Delete or invalidation that fails this way
	// may or may not have reached Redis: call it again (see
	// [Cache.InvalidateTags] for how far an invalidation got). The compute
	// paths never return it: they compute without Redis (Outcome Degraded).
	ErrUnavailable = errors.New("cache: Redis unavailable")
	// ErrComputeTimeout is the error of a compute function that ran past
	// Options.ComputeTimeout: one that honoured its context and returned
	// its deadline's error, or one that ignored it, whose callers are
	// released with it (the compute finishes in the background and its
	// result is dropped), while their own contexts may still be alive. It
	// also matches context.DeadlineExceeded, the error such a call returned
	// before it existed; test it first to tell the compute's bound from the
	// caller's own deadline.
	ErrComputeTimeout = errors.New("cache: compute ran past ComputeTimeout")
	// ErrSoftTimeout is the Result.Err of a stale value that answered
	// because the compute ran past Options.SoftTimeout; the compute goes on
	// in the background and fills when it ends.
	ErrSoftTimeout = errors.New("cache: compute ran past SoftTimeout; the stale value answered")
	// ErrFailSafe is the Result.Err of a stale value served while the
	// fail-safe throttle holds: the origin failed recently (on this or
	// another replica) and is not tried again until FailSafeThrottle ends.
	ErrFailSafe = errors.New("cache: the origin failed recently; a stale value answers until the fail-safe throttle ends")
	// ErrUnchanged is what a compute function returns (wrapped or not) to
	// say that the previous value, which [Previous] gave it, is still
	// current: it is stored again with fresh windows and answers the
	// callers, counted in Stats().Revalidated. Without a previous value it
	// is an error like any other. For a GetOrComputeMany function it covers
	// every key of the call.
	ErrUnchanged = errors.New("cache: unchanged since the previous value")
	// ErrRedisTimeout means one Redis step (a command, a script or a
	// pipeline) ran past Options.RedisTimeout. It counts as a Redis failure:
	// the call goes on without Redis, and enough of them in a row open the
	// circuit breaker.
	ErrRedisTimeout = errors.New("cache: Redis step ran past RedisTimeout")
	// ErrInvalidated is the error of a compute whose value was invalidated
	// (by [Cache.InvalidateTags], [Cache.ExpireTags] or [Cache.Clear]) while
	// it ran or was being stored, and again each of the times it was
	// computed anew: the value answers no caller (and is not stored, unless
	// the invalidation came during its fill: the stored copy is then
	// refused by every read).
	ErrInvalidated = errors.New("cache: invalidated while it was computed, again and again")
	// ErrClosed means the Cache was closed.
	ErrClosed = errors.New("cache: closed")
	// ErrNilContext is returned by a call given a nil context (pass
	// context.Background() or context.TODO() instead), before any work,
	// rather than a panic deep inside it. SetTags, SetTTL, SetStale and
	// Previous treat a nil context as one from outside a compute function.
	ErrNilContext = errors.New("cache: nil context")
	// ErrNotFound is what a compute function returns (wrapped or not) to say
	// that the key has no value. That absence is cached for NegativeTTL, so
	// a missing key does not stampede the origin either; callers get an
	// error matching ErrNotFound until then.
	ErrNotFound = errors.New("cache: not found")
	// ErrUncacheable is what a compute function returns (wrapped, with its
	// result in the error) to hand a result back without storing it and
	// without a stale value standing in for it: a response marked private,
	// say. Callers sharing the call get the same error.
	ErrUncacheable = errors.New("cache: uncacheable result")
	// ErrCodec means the value could not be encoded or decoded by the codec.
	ErrCodec = errors.New("cache: codec")
)

// errCachedNotFound is returned for a cached "not found".
var errCachedNotFound = fmt.Errorf("%w (cached)", ErrNotFound)

// PanicError is returned to every caller waiting on a compute function that
// panicked. It carries the panic value and stack; the key is not left
// locked and the next call computes again.
type PanicError = singleflight.PanicError

// storeFailed is the error of a Get, Set, Delete or invalidation whose
// Redis step failed: ctx's own error when ctx ended (a write may be under
// way), else one matching ErrUnavailable. Errors of the value itself (too
// large, not encodable) are not Redis' and pass as they are.
func storeFailed(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrValueTooLarge) || errors.Is(err, ErrCodec):
		return err
	case ctx.Err() != nil && errors.Is(err, context.Cause(ctx)):
		return err
	case ctx.Err() != nil: // the step ended otherwise (its budget), but the caller's ctx has ended too
		return fmt.Errorf("%w (the Redis step: %v)", context.Cause(ctx), err)
	}
	return &unavailableError{err}
}

// contextError reports whether err matches a context's error.
func contextError(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// unavailableError is a call Redis failed while its caller's ctx was
// alive. It matches ErrUnavailable and what err matches, except the
// context errors of a step that ran out of its budget (ErrRedisTimeout):
// that deadline is the budget's, and a context error would tell the
// caller its own ctx ended.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return "cache: Redis unavailable: " + e.err.Error() }

func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

func (e *unavailableError) Unwrap() error {
	switch {
	case !contextError(e.err):
		return e.err
	case errors.Is(e.err, ErrRedisTimeout):
		return ErrRedisTimeout
	}
	return nil
}

// unavailable is the error of a call the open breaker keeps from Redis: it
// matches [ErrUnavailable] and names the failure that opened the breaker
// ("dial tcp 127.0.0.1:1: connect: connection refused", a step past
// RedisTimeout), so that a wrong address reads as one wherever the error
// is seen.
func (c *Cache[V]) unavailable() error {
	if cause := c.openCause.Load(); cause != nil {
		return fmt.Errorf("%w (breaker open after: %s)", ErrUnavailable, *cause)
	}
	return ErrUnavailable
}
