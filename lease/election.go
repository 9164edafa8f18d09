package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Locker takes leases: a [*Client] (one Redis) or a [*Quorum] (Redlock).
type Locker interface {
	Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error)
}

var (
	_ Locker = (*Client)(nil)
	_ Locker = (*Quorum)(nil)
)

// ElectionOptions configures an [Election]. The zero value is valid.
type ElectionOptions struct {
	// TTL is the leadership lease's TTL: how soon another replica takes
	// over from a leader that died. The leader renews it every third of it
	// (or the locker's ExtendInterval) for as long as the term lasts: the
	// locker's MaxExtensions does not bound a term. Default: 10s.
	TTL time.Duration
	// RetryInterval is how often a follower campaigns again, with jitter of
	// up to half of it. Default: TTL/3.
	RetryInterval time.Duration
	// OnChange, when set, is called when this replica becomes leader (true)
	// and when it stops leading (false), with the term's fence: the latter
	// once the term's context is cancelled, which may be a moment after
	// Leading turned false. It must be fast. Default: nil.
	OnChange func(leading bool, fence int64)
	// OnError, when set, receives the errors that do not stop a campaign or
	// [Election.RunEvery]: Redis failures while campaigning and the
	// function's own errors. Default: nil.
	OnError func(err error)
}

func (o *ElectionOptions) setDefaults() {
	if o.TTL == 0 {
		o.TTL = 10 * time.Second
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = max(o.TTL/3, time.Millisecond)
	}
}

func (o *ElectionOptions) validate() error {
	switch {
	case o.TTL < time.Millisecond:
		return fmt.Errorf("%w: election TTL %s is below 1ms", ErrInvalidOptions, o.TTL)
	case o.RetryInterval < 0:
		return fmt.Errorf("%w: RetryInterval must not be negative", ErrInvalidOptions)
	}
	return nil
}

// Election is one replica's candidacy for leadership under a name: at most
// one replica of a fleet leads at a time, the one holding the name's lease.
// It is safe for concurrent use.
type Election struct {
	locker Locker
	name   string
	opts   ElectionOptions

	// now and after are RunEvery's clock: seams for tests.
	now   func() time.Time
	after func(time.Duration) <-chan time.Time

	mu   sync.Mutex
	term *Term // the current term, nil between terms
}

// NewElection returns this replica's candidacy for leadership under name,
// with leases from locker.
func NewElection(locker Locker, name string, opts ElectionOptions) (*Election, error) {
	if locker == nil {
		return nil, fmt.Errorf("%w: nil locker", ErrInvalidOptions)
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Election{locker: locker, name: name, opts: opts, now: time.Now, after: time.After}, nil
}

// Leading reports whether this replica leads now: from winning the lease
// until its validity deadline ([Lease.Until], moved on by every renewal),
// a renewal that finds it lost, or the end of the term, whichever comes
// first. It reads the deadline itself, so it turns false at the deadline
// even before the term's context is cancelled; another replica can win
// the lease only after it, by at least the drift allowance.
func (e *Election) Leading() bool {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	return t != nil && t.live()
}

// end ends term t once: it is no longer the current term, and OnChange
// hears of it.
func (e *Election) end(t *Term) {
	t.once.Do(func() {
		e.mu.Lock()
		if e.term == t {
			e.term = nil
		}
		e.mu.Unlock()
		if e.opts.OnChange != nil {
			e.opts.OnChange(false, t.Fence())
		}
	})
}

func (e *Election) report(err error) {
	if e.opts.OnError != nil {
		e.opts.OnError(err)
	}
}

// Term is one period of leadership. Its methods are safe for concurrent use.
type Term struct {
	e     *Election
	lease *Lease
	ctx   context.Context
	stop  func() error
	once  sync.Once
}

// Campaign blocks until this replica leads, and returns its term; the
// lease is renewed in the background until the term ends, so call
// [Term.Resign] when done with it. It tries again every RetryInterval (with
// jitter) while another replica leads or Redis fails, and otherwise returns
// only when ctx ends: the cause of ctx ending, joined with why the last
// attempt failed unless another replica held the lease (an error matching
// [ErrUnavailable] or [ErrNoQuorum] that names the servers, when Redis
// could not be reached). ctx bounds the campaign, not the term.
func (e *Election) Campaign(ctx context.Context) (*Term, error) {
	var last error // the last attempt's failure, other than busy
	gaveUp := func() error {
		if last == nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("lease: campaign %q: %w; the last attempt: %w", e.name, context.Cause(ctx), last)
	}
	for {
		l, err := e.locker.Acquire(ctx, e.name, e.opts.TTL)
		if err == nil {
			return e.begin(ctx, l), nil
		}
		busy := errors.Is(err, ErrLeaseBusy)
		if ctx.Err() != nil {
			if !busy && !errors.Is(err, context.Cause(ctx)) {
				last = err // it names the servers still silent when ctx ended
			}
			return nil, gaveUp()
		}
		last = nil
		if !busy {
			last = err
			e.report(err)
		}
		wait := e.opts.RetryInterval
		wait += rand.N(wait/2 + 1)
		if sleep(ctx, wait) != nil {
			return nil, gaveUp()
		}
	}
}

func (e *Election) begin(ctx context.Context, l *Lease) *Term {
	kctx, stop := l.keepAlive(context.WithoutCancel(ctx), math.MaxInt)
	t := &Term{e: e, lease: l, ctx: kctx, stop: stop}
	e.mu.Lock()
	e.term = t
	e.mu.Unlock()
	if e.opts.OnChange != nil {
		e.opts.OnChange(true, l.Fence())
	}
	// The term ends when the lease is lost: say so as soon as it happens.
	context.AfterFunc(kctx, func() { e.end(t) })
	return t
}

// live reports whether the term still leads: its context is not done and
// its lease's validity deadline has not passed.
func (t *Term) live() bool {
	return t.ctx.Err() == nil && t.lease.remaining() > 0
}

// Context returns the term's context: cancelled at the lease's validity
// deadline unless a renewal moved it on, and as soon as a renewal finds the
// lease lost (cause [ErrLeaseLost]), or when the term is resigned (cause
// [context.Canceled]). Work done as leader runs under it, and must stop
// within the drift allowance after it is cancelled, or fence its writes
// with [Term.Fence]: the next leader can win the lease only after the
// deadline.
func (t *Term) Context() context.Context { return t.ctx }

// Fence returns the term's fencing token: higher for every later term.
func (t *Term) Fence() int64 { return t.lease.Fence() }

// Lease returns the lease that makes this replica leader.
func (t *Term) Lease() *Lease { return t.lease }

// Resign ends the term: renewals stop, the term's context is cancelled and
// the lease is released so that another replica can lead at once. It
// returns nil when the lease was still held, or why it was not.
func (t *Term) Resign(ctx context.Context) error {
	lost := t.stop()
	t.e.end(t)
	if lost != nil {
		return lost
	}
	return t.lease.Release(ctx)
}

// resignWithin is Resign with a release of its own, detached from ctx's
// cancellation and bounded by d (see [releaseWithin]).
func (t *Term) resignWithin(ctx context.Context, d time.Duration) error {
	lost := t.stop()
	t.e.end(t)
	if lost != nil {
		return lost
	}
	return releaseWithin(ctx, t.lease, d)
}

// RunEvery runs fn on the leader only: it campaigns, and while this replica
// leads it calls fn at once and then every interval, measured from the
// start of one call to the start of the next, under the term's context
// (cancelled at the lease's validity deadline, or when the lease is found
// lost). A call that takes longer than interval delays the next, which
// then starts as soon as it returns; calls never overlap on a replica. A
// call starts only while the lease has at least its extension interval
// of validity left (the locker's ExtendInterval, by default a third of the
// TTL, at most half the validity): a term whose renewal is late starts
// nothing until a renewal succeeds, and none after it ends. When a term
// ends, RunEvery campaigns again. fn's errors go to OnError. RunEvery
// returns the cause of ctx ending, after resigning.
func (e *Election) RunEvery(ctx context.Context, interval time.Duration, fn func(ctx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidOptions)
	}
	if interval <= 0 {
		return fmt.Errorf("%w: interval %s must be positive", ErrInvalidOptions, interval)
	}
	for {
		term, err := e.Campaign(ctx)
		if err != nil {
			return err
		}
		e.lead(ctx, term, interval, fn)
		err = term.resignWithin(ctx, releaseTimeout(e.opts.TTL))
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err != nil {
			e.report(err)
		}
	}
}

// lead calls fn every interval, start to start, until the term or ctx ends.
func (e *Election) lead(ctx context.Context, term *Term, interval time.Duration, fn func(ctx context.Context) error) {
	tctx, cancel := context.WithCancelCause(term.Context())
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	l := term.lease
	guard := min(l.extendInterval(), (l.ttl-l.b.drift(l.ttl))/2)
	next := e.now()
	for {
		if d := next.Sub(e.now()); d > 0 {
			select {
			case <-tctx.Done():
				return
			case <-e.after(d):
			}
		}
		for {
			moved := l.untilMoved()
			if tctx.Err() != nil || !term.live() {
				return
			}
			if l.remaining() >= guard {
				break
			}
			select { // a renewal is late: wait for one, or for the deadline
			case <-tctx.Done():
				return
			case <-moved:
			}
		}
		start := e.now()
		if err := fn(tctx); err != nil {
			e.report(fmt.Errorf("lease: %s: %w", e.name, err))
		}
		next = start.Add(interval)
		if now := e.now(); next.Before(now) {
			next = now
		}
	}
}
