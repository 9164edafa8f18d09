package lease

import (
	"context"
	crand "crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
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

// Client acquires leases in one Redis (standalone, Sentinel or Cluster). It is
// safe for concurrent use.
type Client struct {
	rdb  redis.Scripter
	addr string // the server's address, for errors
	opts Options
}

// New returns a Client. rdb is any go-redis client (a [redis.UniversalClient]
// satisfies [redis.Scripter]).
func New(rdb redis.Scripter, opts Options) (*Client, error) {
	if isNil(rdb) {
		return nil, fmt.Errorf("%w: nil Redis client (%T)", ErrInvalidOptions, rdb)
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Client{rdb: rdb, addr: serverAddr(rdb), opts: opts}, nil
}

// Keys returns the Redis keys that hold the lease and the fencing counter for
// name. Both carry the hash tag {name}, so they share one Cluster slot with
// any other key that starts with "{name}". A [Quorum] also leaves
// "{name}:a:<token>" for a TTL where a release found no grant of that token,
// and "{name}:r", the server's run_id, with the fence (see the package
// documentation).
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
	b        backend
	name     string
	key      string
	fenceKey string
	token    string
	fence    int64
	ttl      time.Duration

	// mu guards until: when the lease's validity ends unless extended, by
	// the holder's clock (monotonic where the clock gives it): the send
	// time of the acquisition or of the last extension, plus the TTL, less
	// the drift allowance; and moved, closed (and replaced) when until
	// moves.
	mu    sync.Mutex
	until time.Time
	moved chan struct{}
}

// newLease returns a held lease whose validity counts from sent.
func newLease(b backend, name, token string, fence int64, ttl time.Duration, sent time.Time) *Lease {
	key, fenceKey := Keys(name)
	l := &Lease{b: b, name: name, key: key, fenceKey: fenceKey, token: token, fence: fence, ttl: ttl}
	l.setValidFrom(sent, ttl)
	return l
}

func (l *Lease) setValidFrom(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until = sent.Add(ttl - l.b.drift(ttl))
	if l.moved != nil {
		close(l.moved)
	}
	l.moved = make(chan struct{})
}

// untilMoved returns a channel that is closed when the validity deadline
// next moves (an extension succeeded).
func (l *Lease) untilMoved() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.moved
}

// Until returns when the lease's validity ends, by the holder's clock: the
// time the acquisition or the last successful extension was sent, plus its
// TTL, less the clock drift allowance. Redis keeps the lease at least until
// then (it started the TTL on receiving the request), unless its clock runs
// faster than the allowance covers; after it, another holder may have the
// lease. [Lease.KeepAlive] and [Client.Using] cancel the work at this time.
func (l *Lease) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// remaining returns how much of the lease's validity is left by the
// holder's clock.
func (l *Lease) remaining() time.Duration { return l.Until().Sub(l.b.now()) }

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
// so an equality check still rejects the old holder). A [Quorum] lease's
// fence is one above the highest fence its granting majority held (each
// server's clock in microseconds included), written back to a majority
// before Acquire returned: above every fence an earlier quorum lease on the
// name handed out (the package documentation argues it).
func (l *Lease) Fence() int64 { return l.fence }

// TTL returns the TTL the lease was acquired or last extended with.
func (l *Lease) TTL() time.Duration { return l.ttl }

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
	if err := validTTLFor(c, ttl); err != nil {
		return nil, err
	}
	key, fenceKey := Keys(name)
	start := time.Now()
	for attempt := 0; ; attempt++ {
		// A token per attempt, as a Quorum's: nothing of an earlier
		// attempt can be taken for this one's.
		token, err := newToken()
		if err != nil {
			return nil, err
		}
		sent := time.Now()
		fence, remaining, err := c.try(ctx, name, key, fenceKey, token, ttl)
		if err != nil {
			c.opts.observe(ctx, Event{Kind: EventRedisError, Name: name, Err: err})
			return nil, err
		}
		if fence > 0 {
			l := newLease(c, name, token, fence, ttl, sent)
			c.opts.observe(ctx, Event{Kind: EventAcquired, Name: name, Duration: time.Since(start), Fence: fence})
			return l, nil
		}
		c.opts.observe(ctx, Event{Kind: EventBusy, Name: name, Remaining: remaining})
		if attempt >= c.opts.Retries {
			return nil, &BusyError{Remaining: remaining}
		}
		if err := sleep(ctx, backoff(c.opts.RetryBase, c.opts.RetryMax, attempt)); err != nil {
			return nil, err
		}
	}
}

// budget is the bound on one step of a lease of ttl: RedisTimeout, or the
// lease's validity, at most a second. An acquisition or an extension that
// answers after the validity would be of no use.
func (c *Client) budget(ttl time.Duration) time.Duration {
	if c.opts.RedisTimeout > 0 {
		return c.opts.RedisTimeout
	}
	return min(max(ttl-c.drift(ttl), time.Millisecond), maxDefaultBudget)
}

func (c *Client) try(ctx context.Context, name, key, fenceKey, token string, ttl time.Duration) (fence int64, remaining time.Duration, err error) {
	res, err := serverStep(ctx, c.budget(ttl), func(ctx context.Context) ([]int64, error) {
		return acquireScript.Run(ctx, c.rdb, []string{key, fenceKey}, token, ttl.Milliseconds(), c.opts.FenceTTL.Milliseconds()).Int64Slice()
	})
	if err != nil {
		return 0, 0, stepError(ctx, "acquire", name, c.addr, err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("lease: acquire %q on %s: unexpected reply %v", name, c.addr, res)
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
	err := l.b.release(ctx, l)
	opts := l.b.options()
	switch {
	case err == nil:
		opts.observe(ctx, Event{Kind: EventReleased, Name: l.name, Fence: l.fence, Remaining: l.remaining()})
	case errors.Is(err, ErrLeaseLost):
		opts.observe(ctx, Event{Kind: EventReleaseRejected, Name: l.name, Fence: l.fence})
	}
	return err
}

// Extend resets the lease's TTL to ttl. It returns [ErrLeaseLost], and
// changes nothing, when the lease is no longer ours.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := validTTLFor(l.b, ttl); err != nil {
		return err
	}
	sent := l.b.now()
	if err := l.b.extend(ctx, l, ttl); err != nil {
		return err
	}
	l.setValidFrom(sent, ttl)
	return nil
}

func (c *Client) release(ctx context.Context, l *Lease) error {
	return c.byToken(ctx, "release", releaseScript, l, l.ttl, l.token)
}

func (c *Client) extend(ctx context.Context, l *Lease, ttl time.Duration) error {
	return c.byToken(ctx, "extend", extendScript, l, ttl, l.token, ttl.Milliseconds())
}

// byToken runs one of the token-checked scripts on l's key within the
// budget of a lease of ttl: nil when it acted, [ErrLeaseLost] when the
// lease is not ours.
func (c *Client) byToken(ctx context.Context, op string, script *redis.Script, l *Lease, ttl time.Duration, args ...any) error {
	n, err := serverStep(ctx, c.budget(ttl), func(ctx context.Context) (int64, error) {
		return script.Run(ctx, c.rdb, []string{l.key}, args...).Int64()
	})
	if err != nil {
		err = stepError(ctx, op, l.name, c.addr, err)
		c.opts.observe(ctx, Event{Kind: EventRedisError, Name: l.name, Err: err})
		return err
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

func (c *Client) options() *Options { return &c.opts }

// drift allows for a Redis server whose clock runs faster than the
// holder's, and for its expiry's millisecond granularity: 1% of the TTL
// plus 2ms, as a Quorum's default.
func (c *Client) drift(ttl time.Duration) time.Duration {
	return driftAllowance(ttl, defaultDriftFactor)
}

func (c *Client) now() time.Time { return time.Now() }

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
	if err := validTTLFor(c, ttl); err != nil {
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
	tokens := make([]string, len(names))
	asked := false
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
		asked = true
	}
	if !asked {
		return leases, remaining, errs
	}
	// One step: the pipeline, within the budget. The step's goroutine
	// builds its own commands and hands back what it read.
	type reply struct {
		res []int64
		err error
	}
	sent := time.Now()
	replies, err := serverStep(ctx, c.budget(ttl), func(ctx context.Context) ([]reply, error) {
		pipe := p.Pipeline()
		cmds := make([]*redis.Cmd, len(names))
		for i, name := range names {
			if tokens[i] == "" {
				continue
			}
			key, fenceKey := Keys(name)
			// EVAL rather than EVALSHA: a pipeline cannot fall back on NOSCRIPT.
			cmds[i] = acquireScript.Eval(ctx, pipe, []string{key, fenceKey}, tokens[i], ttl.Milliseconds(), c.opts.FenceTTL.Milliseconds())
		}
		_, _ = pipe.Exec(ctx) // errors are per command
		out := make([]reply, len(cmds))
		for i, cmd := range cmds {
			if cmd != nil {
				out[i].res, out[i].err = cmd.Int64Slice()
			}
		}
		return out, nil
	})
	for i := range names {
		if tokens[i] == "" {
			continue
		}
		var res []int64
		stepErr := err
		if stepErr == nil {
			res, stepErr = replies[i].res, replies[i].err
		}
		switch {
		case stepErr != nil:
			errs[i] = stepError(ctx, "acquire", names[i], c.addr, stepErr)
			continue
		case len(res) != 2:
			errs[i] = fmt.Errorf("lease: acquire %q on %s: unexpected reply %v", names[i], c.addr, res)
			continue
		}
		if res[0] > 0 {
			leases[i] = newLease(c, names[i], tokens[i], res[0], ttl, sent)
		} else if res[1] > 0 {
			remaining[i] = time.Duration(res[1]) * time.Millisecond
		}
	}
	return leases, remaining, errs
}
