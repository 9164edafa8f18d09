package cache

import (
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
	// ErrValueTooLarge means the encoded value exceeds Options.MaxValueBytes.
	// Set returns it; a computed value that is too large is returned without
	// error, with Result.Err matching it, and counted in Stats().Unstored.
	ErrValueTooLarge = errors.New("cache: value too large")
	// ErrLeaseBusy means another replica kept computing the key past
	// WaitTimeout and the contention policy is [BusyError].
	ErrLeaseBusy = errors.New("cache: another replica is computing this key (wait timed out)")
	// ErrUnavailable means Redis is known to be down (the circuit breaker is
	// open): Get, Set and Delete return it at once instead of paying a Redis
	// timeout. InvalidateTags, ExpireTags and Clear also return it when
	// Redis fails them (see [Cache.InvalidateTags]).
	ErrUnavailable = errors.New("cache: Redis unavailable (circuit breaker open)")
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
