package lease

// Options of a Client (a Quorum's embed them) and their defaults, and the
// checks every entry point of the package makes of what it is given: a
// Redis client, a name, a TTL and what the drift allowance leaves of it.

import (
	"fmt"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxNameBytes is the longest lease name accepted.
const MaxNameBytes = 4096

// Options configures a [Client]. The zero value is valid: one attempt per
// Acquire, extension every third of the TTL, up to 100 extensions in Using.
type Options struct {
	// Retries is how many more times Acquire tries after finding the lease
	// busy, sleeping a capped exponential backoff with jitter in between.
	// Any other failure (Redis unavailable, no quorum) is returned at once.
	// Default: 0 (one attempt).
	Retries int
	// RedisTimeout bounds each step with one Redis server: an acquisition
	// attempt, an extension, a release (for a [Quorum], each server's part
	// of a round, unless [QuorumOptions].ServerTimeout is set). A server
	// that has not answered within it has failed ([ErrRedisTimeout]),
	// whatever the go-redis client's own timeouts and retries are: the step
	// runs on a goroutine of its own, which stops being waited for. The
	// caller's context bounds every step too. Default: for a [Client], the
	// lease's validity (TTL less the drift allowance), at most 1s; for a
	// Quorum, ServerTimeout's default.
	RedisTimeout time.Duration
	// RetryBase is the first backoff. Default: 10ms.
	RetryBase time.Duration
	// RetryMax caps the backoff. Default: 1s.
	RetryMax time.Duration
	// ExtendInterval is how often KeepAlive and Using extend the lease.
	// Default: a third of the lease TTL.
	ExtendInterval time.Duration
	// MaxExtensions bounds the extensions of one KeepAlive or Using; after the
	// last one the work's context is cancelled at the lease's validity
	// deadline with [ErrExtensionsExhausted]. Default: 100.
	MaxExtensions int
	// FenceTTL is how long the fencing counter outlives its last acquisition.
	// It must outlast any pause of a holder. Default: 24h.
	FenceTTL time.Duration
	// OnExtend, when set, is called after every extension attempt of
	// KeepAlive and Using with its result (nil, an error matching
	// ErrLeaseLost, or a Redis error). It must be fast. Default: nil.
	OnExtend func(l *Lease, err error)
	// Observer, when set, receives the lease's events: acquisitions and
	// their duration, contention, extensions, losses, releases with the
	// validity left, the work's duration and Redis failures. Default: nil.
	Observer Observer
}

func (o *Options) setDefaults() {
	if o.RetryBase == 0 {
		o.RetryBase = 10 * time.Millisecond
	}
	if o.RetryMax == 0 {
		o.RetryMax = time.Second
	}
	if o.MaxExtensions == 0 {
		o.MaxExtensions = 100
	}
	if o.FenceTTL == 0 {
		o.FenceTTL = 24 * time.Hour
	}
}

func (o *Options) validate() error {
	switch {
	case o.Retries < 0:
		return fmt.Errorf("%w: Retries %d is negative", ErrInvalidOptions, o.Retries)
	case o.RetryBase < 0 || o.RetryMax < 0:
		return fmt.Errorf("%w: RetryBase and RetryMax must not be negative", ErrInvalidOptions)
	case o.RetryMax < o.RetryBase:
		return fmt.Errorf("%w: RetryMax %s is below RetryBase %s", ErrInvalidOptions, o.RetryMax, o.RetryBase)
	case o.RedisTimeout < 0:
		return fmt.Errorf("%w: RedisTimeout must not be negative", ErrInvalidOptions)
	case o.ExtendInterval < 0:
		return fmt.Errorf("%w: ExtendInterval must not be negative", ErrInvalidOptions)
	case o.MaxExtensions < 0:
		return fmt.Errorf("%w: MaxExtensions must not be negative", ErrInvalidOptions)
	case o.FenceTTL < time.Millisecond:
		return fmt.Errorf("%w: FenceTTL must be at least 1ms", ErrInvalidOptions)
	}
	return nil
}

// isNil reports whether rdb is nil, or an interface holding a nil pointer
// (a (*redis.Client)(nil) is a non-nil redis.Scripter, and panics on use).
func isNil(rdb redis.Scripter) bool {
	if rdb == nil {
		return true
	}
	v := reflect.ValueOf(rdb)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

func validName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(name) > MaxNameBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidName, len(name), MaxNameBytes)
	}
	return nil
}

func validTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: got %s", ErrInvalidTTL, ttl)
	}
	return nil
}

// defaultDriftFactor is the share of the TTL allowed for clock drift: a
// Client's, and a Quorum's by default.
const defaultDriftFactor = 0.01

// driftAllowance is TTL × factor + 2ms: what the holder subtracts from a
// TTL it measured from the send time, for clocks that run at different
// rates and for Redis' millisecond expiry.
func driftAllowance(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + 2*time.Millisecond
}

// validTTLFor checks ttl, and that something is left of it after b's drift
// allowance.
func validTTLFor(b backend, ttl time.Duration) error {
	if err := validTTL(ttl); err != nil {
		return err
	}
	if d := b.drift(ttl); d >= ttl {
		return fmt.Errorf("%w: %s leaves no validity after the clock drift allowance %s", ErrInvalidTTL, ttl, d)
	}
	return nil
}
