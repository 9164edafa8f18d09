package lease

import (
	"context"
	crand "crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/fencelua"
)

var (
	//go:embed acquire.lua
	acquireSrc    string
	acquireScript = redis.NewScript(fencelua.Source + acquireSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed extend.lua
	extendSrc    string
	extendScript = redis.NewScript(extendSrc)
)

// MaxNameBytes is the longest lease name accepted.
const MaxNameBytes = 4096

// Options configures a [Client]. The zero value is valid: one attempt per
// Acquire, extension every third of the TTL, up to 100 extensions in Using.
type Options struct {
	// Retries is how many more times Acquire tries after finding the lease
	// busy, sleeping a capped exponential backoff with jitter in between.
	// Default: 0 (one attempt).
	Retries int
	// RetryBase is the first backoff. Default: 10ms.
	RetryBase time.Duration
	// RetryMax caps the backoff. Default: 1s.
	RetryMax time.Duration
	// ExtendInterval is how often KeepAlive and Using extend the lease.
	// Default: a third of the lease TTL.
	ExtendInterval time.Duration
	// MaxExtensions bounds the extensions of one KeepAlive or Using; after the
	// last one the lease runs out at its TTL and the work's context is
	// cancelled with [ErrExtensionsExhausted]. Default: 100.
	MaxExtensions int
	// FenceTTL is how long the fencing counter outlives its last acquisition.
	// It must outlast any pause of a holder. Default: 24h.
	FenceTTL time.Duration
	// OnExtend, when set, is called after every extension attempt of
	// KeepAlive and Using with its result (nil, an error matching
	// ErrLeaseLost, or a Redis error). It must be fast. Default: nil.
	OnExtend func(l *Lease, err error)
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
	case o.ExtendInterval < 0:
		return fmt.Errorf("%w: ExtendInterval must not be negative", ErrInvalidOptions)
	case o.MaxExtensions < 0:
		return fmt.Errorf("%w: MaxExtensions must not be negative", ErrInvalidOptions)
	case o.FenceTTL < time.Millisecond:
		return fmt.Errorf("%w: FenceTTL must be at least 1ms", ErrInvalidOptions)
	}
	return nil
}

// Client acquires leases in one Redis (standalone, Sentinel or Cluster). It is
// safe for concurrent use.
type Client struct {
	rdb  redis.Scripter
	opts Options
}

// New returns a Client. rdb is any go-redis client (a [redis.UniversalClient]
// satisfies [redis.Scripter]).
func New(rdb redis.Scripter, opts Options) (*Client, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidOptions)
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Client{rdb: rdb, opts: opts}, nil
}

// Keys returns the Redis keys that hold the lease and the fencing counter for
// name. Both carry the hash tag {name}, so they share one Cluster slot with
// any other key that starts with "{name}".
func Keys(name string) (leaseKey, fenceKey string) {
	return "{" + name + "}:l", "{" + name + "}:f"
}

// BusyError is returned by [Client.Acquire] when another holder has the lease.
// It matches [ErrLeaseBusy] with errors.Is.
type BusyError struct {
	// Remaining is the holder's remaining lease time when last seen, or 0
	// when unknown.
	Remaining time.Duration
}

// Error implements error.
func (e *BusyError) Error() string {
	return fmt.Sprintf("%s (expires in %s)", ErrLeaseBusy, e.Remaining)
}

// Is reports whether target is [ErrLeaseBusy].
func (e *BusyError) Is(target error) bool { return target == ErrLeaseBusy }

// Lease is a held lease. Its methods are safe for concurrent use.
type Lease struct {
	c        *Client
	name     string
	key      string
	fenceKey string
	token    string
	fence    int64
	ttl      time.Duration
}

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Key returns the Redis key that holds the token.
func (l *Lease) Key() string { return l.key }

// FenceKey returns the Redis key of the fencing counter.
func (l *Lease) FenceKey() string { return l.fenceKey }

// Token returns the random 128-bit token, hex-encoded, that proves ownership.
func (l *Lease) Token() string { return l.token }

// Fence returns the fencing token: the fence key's value at acquisition,
// max(previous + 1, the Redis server's clock in microseconds). It is higher
// for every later acquisition of the same name, also after a failover or a
// restart lost the fence key (unless the new server's clock is behind the
// old one's by more than the time since; even then the two fences differ,
// so an equality check still rejects the old holder).
func (l *Lease) Fence() int64 { return l.fence }

// TTL returns the TTL the lease was acquired or last extended with.
func (l *Lease) TTL() time.Duration { return l.ttl }

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

func newToken() (string, error) {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lease: random token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Acquire takes the lease on name for ttl, trying up to 1+Retries times. When
// another holder keeps it, it returns a [*BusyError] (errors.Is ErrLeaseBusy).
func (c *Client) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	key, fenceKey := Keys(name)
	for attempt := 0; ; attempt++ {
		fence, remaining, err := c.try(ctx, key, fenceKey, token, ttl)
		if err != nil {
			return nil, err
		}
		if fence > 0 {
			return &Lease{c: c, name: name, key: key, fenceKey: fenceKey, token: token, fence: fence, ttl: ttl}, nil
		}
		if attempt >= c.opts.Retries {
			return nil, &BusyError{Remaining: remaining}
		}
		if err := sleep(ctx, backoff(c.opts.RetryBase, c.opts.RetryMax, attempt)); err != nil {
			return nil, err
		}
	}
}

func (c *Client) try(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (fence int64, remaining time.Duration, err error) {
	res, err := acquireScript.Run(ctx, c.rdb, []string{key, fenceKey}, token, ttl.Milliseconds(), c.opts.FenceTTL.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("lease: acquire %s: %w", key, err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("lease: acquire %s: unexpected reply %v", key, res)
	}
	if res[1] > 0 {
		remaining = time.Duration(res[1]) * time.Millisecond
	}
	return res[0], remaining, nil
}

// backoff returns the sleep before retry attempt+1: capped exponential with
// "equal jitter" (half fixed, half random), so retries of many callers spread
// out but never collapse to zero.
func backoff(base, maxD time.Duration, attempt int) time.Duration {
	d := maxD
	if attempt < 30 {
		if e := base << attempt; e > 0 && e < maxD {
			d = e
		}
	}
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Release gives the lease up. It returns [ErrLeaseLost], and deletes nothing,
// when the lease is no longer ours.
func (l *Lease) Release(ctx context.Context) error {
	n, err := releaseScript.Run(ctx, l.c.rdb, []string{l.key}, l.token).Int64()
	if err != nil {
		return fmt.Errorf("lease: release %s: %w", l.key, err)
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

// Extend resets the lease's TTL to ttl. It returns [ErrLeaseLost], and
// changes nothing, when the lease is no longer ours.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := validTTL(ttl); err != nil {
		return err
	}
	n, err := extendScript.Run(ctx, l.c.rdb, []string{l.key}, l.token, ttl.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("lease: extend %s: %w", l.key, err)
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

// KeepAlive extends the lease in the background every ExtendInterval, up to
// MaxExtensions times, until stop is called or ctx is done. The returned
// context is ctx, cancelled with cause [ErrLeaseLost] when an extension finds
// the lease gone (or none succeeds for a whole TTL), and with
// [ErrExtensionsExhausted] when the lease runs out after the last extension.
// stop ends the background work, waits for it, and returns that cause, or nil
// while the lease is still held. stop is safe to call more than once.
func (l *Lease) KeepAlive(ctx context.Context) (context.Context, func() error) {
	kctx, cancel := context.WithCancelCause(ctx)
	interval := l.c.opts.ExtendInterval
	if interval <= 0 {
		interval = l.ttl / 3
	}
	interval = max(interval, time.Millisecond)
	quit := make(chan struct{})
	done := make(chan struct{})
	var lost error
	go func() {
		defer close(done)
		lost = l.keep(kctx, quit, interval)
		if lost != nil {
			cancel(lost)
		}
	}()
	var once sync.Once
	return kctx, func() error {
		once.Do(func() {
			close(quit)
			<-done
			cancel(context.Canceled)
		})
		return lost
	}
}

// keep runs the extension loop; it returns the cause of losing the lease, or
// nil when told to quit or when ctx ends.
func (l *Lease) keep(ctx context.Context, quit <-chan struct{}, interval time.Duration) error {
	validUntil := time.Now().Add(l.ttl)
	t := time.NewTimer(interval)
	defer t.Stop()
	for n := 0; ; {
		if n >= l.c.opts.MaxExtensions {
			// No more extensions: the lease runs out at its TTL.
			t.Reset(time.Until(validUntil))
			select {
			case <-t.C:
				return ErrExtensionsExhausted
			case <-quit:
				return nil
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-quit:
			return nil
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		sent := time.Now()
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
		err := l.Extend(ectx, l.ttl)
		ecancel()
		if l.c.opts.OnExtend != nil {
			l.c.opts.OnExtend(l, err)
		}
		switch {
		case err == nil:
			n++
			validUntil = sent.Add(l.ttl)
		case errors.Is(err, ErrLeaseLost):
			return ErrLeaseLost
		case !time.Now().Before(validUntil):
			// Redis did not answer for a whole TTL: assume the lease is gone.
			return fmt.Errorf("%w: %w", ErrLeaseLost, err)
		}
		t.Reset(min(interval, max(time.Until(validUntil), time.Millisecond)))
	}
}

// Using acquires the lease on name, runs fn while holding it, extends it in
// the background (see [Lease.KeepAlive]), and releases it when fn returns.
// fn's context is cancelled when the lease is lost; Using then returns an
// error matching [ErrLeaseLost] (or [ErrExtensionsExhausted]) joined with
// fn's own error. When the lease is busy, fn does not run and Using returns
// a [*BusyError].
func (c *Client) Using(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidOptions)
	}
	l, err := c.Acquire(ctx, name, ttl)
	if err != nil {
		return err
	}
	kctx, stop := l.KeepAlive(ctx)
	fnErr := fn(kctx, l)
	lost := stop()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout(ttl))
	defer cancel()
	relErr := l.Release(rctx)
	if lost != nil || errors.Is(relErr, ErrLeaseLost) {
		if lost == nil {
			lost = ErrLeaseLost
		}
		return errors.Join(fnErr, lost)
	}
	return errors.Join(fnErr, relErr)
}

func releaseTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl, 100*time.Millisecond), 5*time.Second)
}

// String describes the lease for logs without revealing its token.
func (l *Lease) String() string {
	return fmt.Sprintf("lease %q fence %d ttl %s", l.name, l.fence, l.ttl)
}

// AcquireMany tries the leases on names once each, in one round trip where
// the client can pipeline. leases[i] is nil when names[i] is held by
// another owner (remaining[i] then says for how long) or failed (errs[i]).
// It does not retry.
func (c *Client) AcquireMany(ctx context.Context, names []string, ttl time.Duration) (leases []*Lease, remaining []time.Duration, errs []error) {
	leases = make([]*Lease, len(names))
	remaining = make([]time.Duration, len(names))
	errs = make([]error, len(names))
	if err := validTTL(ttl); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return leases, remaining, errs
	}
	p, ok := c.rdb.(interface{ Pipeline() redis.Pipeliner })
	if !ok {
		for i, name := range names {
			l, err := c.Acquire(ctx, name, ttl)
			var busy *BusyError
			switch {
			case err == nil:
				leases[i] = l
			case errors.As(err, &busy):
				remaining[i] = busy.Remaining
			default:
				errs[i] = err
			}
		}
		return leases, remaining, errs
	}
	pipe := p.Pipeline()
	cmds := make([]*redis.Cmd, len(names))
	tokens := make([]string, len(names))
	for i, name := range names {
		if err := validName(name); err != nil {
			errs[i] = err
			continue
		}
		token, err := newToken()
		if err != nil {
			errs[i] = err
			continue
		}
		tokens[i] = token
		key, fenceKey := Keys(name)
		// EVAL rather than EVALSHA: a pipeline cannot fall back on NOSCRIPT.
		cmds[i] = acquireScript.Eval(ctx, pipe, []string{key, fenceKey}, token, ttl.Milliseconds(), c.opts.FenceTTL.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		res, err := cmd.Int64Slice()
		if err == nil && len(res) != 2 {
			err = fmt.Errorf("unexpected reply %v", res)
		}
		if err != nil {
			errs[i] = fmt.Errorf("lease: acquire %s: %w", names[i], err)
			continue
		}
		if res[0] > 0 {
			key, fenceKey := Keys(names[i])
			leases[i] = &Lease{c: c, name: names[i], key: key, fenceKey: fenceKey, token: tokens[i], fence: res[0], ttl: ttl}
		} else if res[1] > 0 {
			remaining[i] = time.Duration(res[1]) * time.Millisecond
		}
	}
	return leases, remaining, errs
}
