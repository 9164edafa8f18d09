package lease

// A Quorum: leases by the Redlock algorithm over independent Redis
// masters. Its options, and the steps of a lease (the grant, the fence
// written back, an attempt abandoned, Release, Extend), each a round that a
// majority must take (quorum_round.go).

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/fencelua"
)

var (
	//go:embed quorum_server.lua
	quorumServerSrc string

	//go:embed quorum_acquire.lua
	quorumAcquireSrc    string
	quorumAcquireScript = redis.NewScript(fencelua.FloorSource + quorumServerSrc + quorumAcquireSrc)

	//go:embed quorum_fence.lua
	quorumFenceSrc    string
	quorumFenceScript = redis.NewScript(quorumFenceSrc)

	//go:embed quorum_abandon.lua
	quorumAbandonSrc    string
	quorumAbandonScript = redis.NewScript(quorumAbandonSrc)
)

// tombstoneKey is where a quorum's release leaves a tombstone for token:
// a grant of that token that arrives later finds it and takes nothing.
func tombstoneKey(name, token string) string { return "{" + name + "}:a:" + token }

// runKey is where a quorum's fence write-back records the server's run_id:
// the server has taken a fenced lease on name since it last started.
func runKey(name string) string { return "{" + name + "}:r" }

// QuorumOptions configures a [Quorum]. The zero value is valid: the
// defaults of [Options], a drift factor of 0.01, and a tenth of the TTL (at
// most a second) for each server to answer.
type QuorumOptions struct {
	Options
	// DriftFactor is the share of the TTL allowed for clocks that run at
	// different rates: a lease is valid for TTL − elapsed − (TTL×DriftFactor
	// + 2ms) after the first request was sent. It must be a number in
	// [0, 1): NewQuorum refuses NaN, infinities and anything outside with
	// [ErrInvalidOptions]. Default: 0.01 (also for 0).
	DriftFactor float64
	// ServerTimeout bounds each server's answer in every round, as
	// RedisTimeout does for a [Client] (it takes precedence over
	// RedisTimeout); a server that does not answer in time counts as failed
	// ([ErrRedisTimeout]), whatever the Redis clients' own timeouts are.
	// ContextTimeoutEnabled on the clients lets go-redis give up the call
	// itself at that time, rather than on its own ReadTimeout. Default:
	// RedisTimeout when set, otherwise TTL/10, at most 1s.
	ServerTimeout time.Duration
	// RestartQuarantine is how long after a server restarted its grant may
	// not count towards a majority, while another server holds the lease
	// or does not answer and some server shows the name was leased before:
	// the restart may have lost a lease that is still valid (see the
	// package documentation). It must be at least the longest TTL any
	// holder gives the name, extensions included. Default: the TTL being
	// acquired; negative: off (servers that persist every write with
	// fsync, and so never lose a lease).
	RestartQuarantine time.Duration
}

func (o *QuorumOptions) setDefaults() {
	o.Options.setDefaults()
	if o.DriftFactor == 0 {
		o.DriftFactor = defaultDriftFactor
	}
}

func (o *QuorumOptions) validate() error {
	switch {
	case !(o.DriftFactor >= 0 && o.DriftFactor < 1):
		// Written so that NaN, which compares false with everything, is
		// refused too: it would make every validity check fail.
		return fmt.Errorf("%w: DriftFactor %g is outside [0, 1)", ErrInvalidOptions, o.DriftFactor)
	case o.ServerTimeout < 0:
		return fmt.Errorf("%w: ServerTimeout must not be negative", ErrInvalidOptions)
	}
	return o.Options.validate()
}

// Quorum acquires leases by the Redlock algorithm over N independent Redis
// masters (no replication between them): a lease is held when a majority
// granted it within its validity time, and its fence is higher than any
// fence an earlier quorum lease on the name handed out (see the package
// documentation for the argument). It has the API of [Client]. It is safe
// for concurrent use.
type Quorum struct {
	servers []redis.Scripter
	addrs   []string // each server's address, for errors
	dials   []*link  // each server's failed dials (dial.go); nil for another Scripter
	opts    QuorumOptions

	// clock and afterGrant are seams for tests: the holder's clock, and a
	// hook run after an attempt's grant round, before its fence write-back
	// (granted) or its release (not granted).
	clock      func() time.Time
	afterGrant func(ctx context.Context, granted bool)
}

// NewQuorum returns a Quorum over servers, one client per independent
// Redis master. A majority, len(servers)/2+1, must grant every lease. Use
// an odd number, 3 or 5: an even number is accepted, and as safe (any two
// majorities of it still share a server), but survives no more failed
// servers than one fewer would (4 survive one, as 3 do; 2 survive none).
// It is accepted because it is safe, and because dropping one server from
// an odd set leaves an even one whose majorities still meet the old set's
// (3 of 4 and 3 of 5 share a server), so a fleet can pass through it while
// a server is replaced.
func NewQuorum(servers []redis.Scripter, opts QuorumOptions) (*Quorum, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no Redis servers", ErrInvalidOptions)
	}
	for i, s := range servers {
		if isNil(s) {
			return nil, fmt.Errorf("%w: Redis client %d is nil (%T)", ErrInvalidOptions, i, s)
		}
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	addrs := make([]string, len(servers))
	dials := make([]*link, len(servers))
	for i, s := range servers {
		addrs[i] = serverAddr(s)
		dials[i] = linkOf(s)
	}
	return &Quorum{servers: append([]redis.Scripter(nil), servers...), addrs: addrs, dials: dials, opts: opts, clock: time.Now}, nil
}

// Majority returns how many servers must grant a lease.
func (q *Quorum) Majority() int { return len(q.servers)/2 + 1 }

func (q *Quorum) options() *Options { return &q.opts.Options }

func (q *Quorum) now() time.Time { return q.clock() }

func (q *Quorum) drift(ttl time.Duration) time.Duration {
	return driftAllowance(ttl, q.opts.DriftFactor)
}

func (q *Quorum) serverTimeout(ttl time.Duration) time.Duration {
	switch {
	case q.opts.ServerTimeout > 0:
		return q.opts.ServerTimeout
	case q.opts.RedisTimeout > 0:
		return q.opts.RedisTimeout
	}
	return min(max(ttl/10, time.Millisecond), maxDefaultBudget)
}

// Acquire takes the lease on name for ttl on a majority of the servers,
// trying again (up to Retries times, with capped, jittered backoff) only
// while other holders keep it. When they still do, it returns a
// [*BusyError] (errors.Is ErrLeaseBusy); when a majority cannot be
// reached, at once a [*QuorumError] (errors.Is ErrNoQuorum): a retry would
// cost another ServerTimeout for servers that are down, and the caller (an
// [Election]'s campaign) decides when to try again.
// In both cases nothing is held: what a failed attempt took is released.
// Acquire returns by ctx's deadline (or cancellation), whatever the
// servers do: every round ends with it, and when ctx ends before a failed
// attempt's release is done, the release goes on in the background for at
// most ServerTimeout, and what it finds then is still released.
// Every attempt has a token of its own, so that a message of an earlier
// attempt that the network delays (its grant, its release) can only touch
// that attempt's grant, never a later one's.
func (q *Quorum) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := validTTLFor(q, ttl); err != nil {
		return nil, err
	}
	start := q.now()
	for attempt := 0; ; attempt++ {
		token, err := newToken()
		if err != nil {
			return nil, err
		}
		l, err := q.try(ctx, name, token, ttl)
		if err == nil {
			q.opts.observe(ctx, Event{Kind: EventAcquired, Name: name, Duration: q.now().Sub(start), Fence: l.fence})
			return l, nil
		}
		var busy *BusyError
		if !errors.As(err, &busy) {
			return nil, err
		}
		q.opts.observe(ctx, Event{Kind: EventBusy, Name: name, Remaining: busy.Remaining})
		if attempt >= q.opts.Retries {
			return nil, err
		}
		if err := sleep(ctx, backoff(q.opts.RetryBase, q.opts.RetryMax, attempt)); err != nil {
			return nil, err
		}
	}
}

// try is one attempt: round one takes the lease and reads the fence floors
// on every server; round two writes max+1 back where the lease is still
// ours. The lease is returned only when both rounds reached a majority
// within the validity time.
func (q *Quorum) try(ctx context.Context, name, token string, ttl time.Duration) (*Lease, error) {
	key, fenceKey := Keys(name)
	keys := []string{key, fenceKey, tombstoneKey(name, token), runKey(name)}
	n, need := len(q.servers), q.Majority()
	sent := q.now()
	valid := func() bool { return q.now().Sub(sent) < ttl-q.drift(ttl) }

	quarantine := q.restartQuarantine(ttl)
	// Each server's run_id, as its grant read it: its write-back records
	// it. Written by the grant's goroutine for server i before its reply
	// is sent, read for the granting servers only, after their replies.
	runIDs := make([]string, n)
	grant := q.round(ctx, "acquire", name, nil, ttl, nil, func(ctx context.Context, i int, rdb redis.Scripter) ([]int64, error) {
		v, err := quorumAcquireScript.Run(ctx, rdb, keys, token, ttl.Milliseconds(), quarantine.Milliseconds()).Slice()
		if err != nil {
			return nil, err
		}
		res := make([]int64, 0, len(v))
		for _, x := range v {
			switch x := x.(type) {
			case int64:
				res = append(res, x)
			case string:
				runIDs[i] = x
			}
		}
		return res, nil
	})
	q.screen(ctx, name, &grant, quarantine)
	granted := len(grant.yes) >= need && valid()
	if q.afterGrant != nil {
		q.afterGrant(ctx, granted)
	}
	if !granted {
		q.abandon(ctx, name, token, ttl, grant)
		switch {
		case len(grant.yes) >= need:
			return nil, fmt.Errorf("%w: %s: granted by %d of %d servers after its validity (TTL %s less drift %s) had passed", ErrLeaseLost, name, len(grant.yes), n, ttl, q.drift(ttl))
		case len(grant.no) == 0 || len(grant.yes)+len(grant.no)+grant.restarted < need:
			// The failures alone kept the majority out of reach.
			return nil, grant.quorumError("acquire", need, n)
		}
		return nil, &BusyError{Remaining: time.Duration(grant.left) * time.Millisecond}
	}
	fence := int64(0)
	for _, f := range grant.vals {
		fence = max(fence, f)
	}
	fence++
	fenceKeys := []string{key, fenceKey, runKey(name)}
	written := q.round(ctx, "fence", name, grant.yes, ttl, q.decided, func(ctx context.Context, i int, rdb redis.Scripter) ([]int64, error) {
		ok, err := quorumFenceScript.Run(ctx, rdb, fenceKeys, token, fence, q.opts.FenceTTL.Milliseconds(), runIDs[i]).Int64()
		return []int64{ok, 0}, err
	})
	if len(written.yes) < need || !valid() {
		// A pause between the rounds let the lease run out on too many
		// servers: this fence must not be used.
		q.abandon(ctx, name, token, ttl, grant)
		if len(written.errs) == 0 {
			return nil, fmt.Errorf("%w: %s: the fence reached %d of %d servers within the validity time, %d needed", ErrLeaseLost, name, len(written.yes), n, need)
		}
		return nil, written.quorumError("fence", need, n)
	}
	return newLease(q, name, token, fence, ttl, sent), nil
}

// abandon releases a failed attempt's grants, under a context of its own so
// that a cancelled caller does not leave a minority holding them. It goes
// to every server that did not refuse the grant: where the grant was
// taken, it is deleted; where the grant is still on its way (the server did
// not answer), a tombstone refuses it when it comes. A server that refused
// the grant holds nothing of the attempt's and is left alone. It waits for
// the release while ctx lasts, no longer: when ctx ends first, the release
// goes on in the background for at most ServerTimeout, so that Acquire
// returns by its caller's deadline.
func (q *Quorum) abandon(ctx context.Context, name, token string, ttl time.Duration, grant tally) {
	idx := make([]int, 0, len(q.servers))
	for i := range q.servers {
		if !slices.Contains(grant.no, i) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	key, _ := Keys(name)
	detached(ctx, q.serverTimeout(ttl), func(rctx context.Context) {
		q.round(rctx, "release", name, idx, ttl, nil, yesNo(quorumAbandonScript, []string{key, tombstoneKey(name, token)}, token, ttl.Milliseconds()))
	})
}

// release deletes the lease on every server where it is ours. It is
// released when a majority deleted it; when a majority no longer held it
// the lease had been lost ([ErrLeaseLost]).
func (q *Quorum) release(ctx context.Context, l *Lease) error {
	// Every server's answer is awaited: a release leaves no copy behind
	// that it could still delete. Where the lease is not ours, a tombstone
	// refuses a grant of ours that the network still holds.
	t := q.round(ctx, "release", l.name, nil, l.ttl, nil, yesNo(quorumAbandonScript, []string{l.key, tombstoneKey(l.name, l.token)}, l.token, l.ttl.Milliseconds()))
	return q.verdict(t, "release", l)
}

// extend resets the lease's TTL on every server where it is ours; it holds
// when a majority took it within the new validity time.
func (q *Quorum) extend(ctx context.Context, l *Lease, ttl time.Duration) error {
	sent := q.now()
	t := q.round(ctx, "extend", l.name, nil, ttl, q.decided, yesNo(extendScript, []string{l.key}, l.token, ttl.Milliseconds()))
	if err := q.verdict(t, "extend", l); err != nil {
		return err
	}
	if q.now().Sub(sent) >= ttl-q.drift(ttl) {
		return fmt.Errorf("%w: %s: the extension took longer than its validity", ErrLeaseLost, l.name)
	}
	return nil
}

// verdict turns a release's or an extension's replies into its result: nil
// when a majority did it, [ErrLeaseLost] when so many said "not ours" that
// no majority can still be ours, a [*QuorumError] otherwise.
func (q *Quorum) verdict(t tally, op string, l *Lease) error {
	n, need := len(q.servers), q.Majority()
	switch {
	case len(t.yes) >= need:
		return nil
	case len(t.no) > n-need:
		return ErrLeaseLost
	default:
		return fmt.Errorf("lease: %s %s: %w", op, l.key, t.quorumError(op, need, n))
	}
}

// Using is [Client.Using] over the quorum: acquire on a majority, run fn,
// extend on every server in the background, release on every server.
func (q *Quorum) Using(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error) error {
	return using(ctx, ttl, func() (*Lease, error) { return q.Acquire(ctx, name, ttl) }, fn)
}
