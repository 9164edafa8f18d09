package lease

// A Client: leases in one Redis, each step one Lua script within its
// budget. Acquire tries again, with the backoff a Quorum shares, only
// while another holder keeps the lease; Release and Extend act by token.
// AcquireMany is acquire_many.go.

import (
	"context"
	crand "crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
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

// Client acquires leases in one Redis (standalone, Sentinel or Cluster). It is
// safe for concurrent use.
type Client struct {
	rdb  redis.Scripter
	addr string // the server's address, for errors
	dial *link  // rdb's failed dials (dial.go); nil for another Scripter
	opts Options

	// clock is the holder's clock: a seam for tests.
	clock func() time.Time
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
	return &Client{rdb: rdb, addr: serverAddr(rdb), dial: linkOf(rdb), opts: opts, clock: time.Now}, nil
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

func newToken() (string, error) {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lease: random token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Acquire takes the lease on name for ttl, trying up to 1+Retries times. When
// another holder keeps it, it returns a [*BusyError] (errors.Is ErrLeaseBusy).
// A lease is handed out only while its validity lasts ([Lease.Until] is
// ahead): a grant whose reply arrives after it (a slow network, a pause
// of the holder) may already be another holder's, so Acquire releases it
// and returns an error matching [ErrLeaseLost], as a [Quorum]'s does.
func (c *Client) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := validTTLFor(c, ttl); err != nil {
		return nil, err
	}
	key, fenceKey := Keys(name)
	start := c.now()
	for attempt := 0; ; attempt++ {
		// A token per attempt, as a Quorum's: nothing of an earlier
		// attempt can be taken for this one's.
		token, err := newToken()
		if err != nil {
			return nil, err
		}
		sent := c.now()
		fence, remaining, err := c.try(ctx, name, key, fenceKey, token, ttl)
		if err != nil {
			c.opts.observe(ctx, Event{Kind: EventRedisError, Name: name, Err: err})
			return nil, err
		}
		if fence > 0 {
			l := newLease(c, name, token, fence, ttl, sent)
			if l.remaining() <= 0 {
				// The grant answered after the validity it was sent with:
				// another holder may have the lease by now, so it is not
				// handed out (a Quorum's check), and what Redis may still
				// hold of it is given back.
				c.giveBack(ctx, ttl, l)
				return nil, lateGrant(name, ttl, c.drift(ttl))
			}
			c.opts.observe(ctx, Event{Kind: EventAcquired, Name: name, Duration: c.now().Sub(start), Fence: fence})
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

// lateGrant is the error of an acquisition granted after its validity
// (ttl less the drift allowance drift, from when it was sent) had passed.
func lateGrant(name string, ttl, drift time.Duration) error {
	return fmt.Errorf("%w: %s: granted after its validity (TTL %s less drift %s) had passed", ErrLeaseLost, name, ttl, drift)
}

// giveBack releases leases that were granted too late to be handed out,
// token-checked, within a release's budget and without outliving ctx
// (see [detached]).
func (c *Client) giveBack(ctx context.Context, ttl time.Duration, ls ...*Lease) {
	detached(ctx, c.budget(ttl), func(ctx context.Context) {
		for _, l := range ls {
			if ctx.Err() != nil {
				return
			}
			_ = c.release(ctx, l)
		}
	})
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
	res, err := serverStep(ctx, c.budget(ttl), c.dial, func(ctx context.Context) ([]int64, error) {
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
	n, err := serverStep(ctx, c.budget(ttl), c.dial, func(ctx context.Context) (int64, error) {
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

func (c *Client) now() time.Time { return c.clock() }
