package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// backend is what a [Lease] goes back to for its extensions and its
// release: a [Client] (one Redis) or a [Quorum] (a majority of several).
type backend interface {
	release(ctx context.Context, l *Lease) error
	extend(ctx context.Context, l *Lease, ttl time.Duration) error
	options() *Options
	// drift is what the holder must subtract from a TTL that was set at a
	// time it measured, for clocks that run at different rates.
	drift(ttl time.Duration) time.Duration
	// now is the holder's clock.
	now() time.Time
}

var (
	_ backend = (*Client)(nil)
	_ backend = (*Quorum)(nil)
)

// KeepAlive extends the lease in the background every ExtendInterval, up to
// MaxExtensions times, until stop is called or ctx is done. The returned
// context is ctx, cancelled at the lease's validity deadline ([Lease.Until],
// which every extension moves: KeepAlive's own, and the caller's
// [Lease.Extend], to a shorter TTL too) with cause [ErrLeaseLost] (or
// [ErrExtensionsExhausted] after the last allowed extension), and with
// [ErrLeaseLost] as soon as an extension finds the lease gone. The deadline
// is the end of the lease by the holder's clock, counted from when the
// acquisition or extension was sent, less the clock drift allowance; an
// extension that has not answered by then does not keep the work alive.
// When the deadline has already passed, the returned context is cancelled
// before KeepAlive returns.
// stop ends the background work, waits for it, and returns that cause, or nil
// while the lease is still held. stop is safe to call more than once.
func (l *Lease) KeepAlive(ctx context.Context) (context.Context, func() error) {
	return l.keepAlive(ctx, l.b.options().MaxExtensions)
}

// extendInterval is how often KeepAlive extends the lease.
func (l *Lease) extendInterval() time.Duration {
	interval := l.b.options().ExtendInterval
	if interval <= 0 {
		interval = l.ttl / 3
	}
	return max(interval, time.Millisecond)
}

// keepAlive is KeepAlive with at most limit extensions.
func (l *Lease) keepAlive(ctx context.Context, limit int) (context.Context, func() error) {
	kctx, cancel := context.WithCancelCause(ctx)
	opts := l.b.options()
	if l.remaining() <= 0 {
		// The validity ended before the work began (the holder was
		// paused since it acquired): the work's context is done from the
		// start, not once a timer has fired, so no work begins under it.
		lost := fmt.Errorf("%w: the validity ended before the work began", ErrLeaseLost)
		cancel(lost)
		opts.observe(ctx, Event{Kind: EventLost, Name: l.name, Fence: l.fence, Err: lost})
		return kctx, func() error { return lost }
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	var lost error
	go func() {
		defer close(done)
		lost = l.keep(kctx, quit, l.extendInterval(), limit)
		if lost != nil {
			cancel(lost) // first: the work stops before anything else runs
			opts.observe(ctx, Event{Kind: EventLost, Name: l.name, Fence: l.fence, Err: lost})
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

// keep runs the extensions and watches the validity deadline; it returns
// the cause of losing the lease, or nil when told to quit or when ctx ends.
// Each extension runs on a goroutine of its own, so that one that hangs
// does not hold the deadline up; one still out when keep returns is
// cancelled, and its result is not reported.
func (l *Lease) keep(ctx context.Context, quit <-chan struct{}, interval time.Duration, limit int) error {
	opts := l.b.options()
	// The deadline follows every move of Until, an Extend of the caller's
	// (to a shorter TTL included) as well as keep's own extensions.
	moved := l.untilMoved()
	deadline := time.NewTimer(l.remaining())
	defer deadline.Stop()
	next := time.NewTimer(min(interval, max(l.remaining(), time.Millisecond)))
	defer next.Stop()
	ectx, ecancel := context.WithCancel(context.WithoutCancel(ctx))
	defer ecancel()
	results := make(chan error, 1) // buffered: an extension never waits for keep
	var (
		n       int   // successful extensions
		last    error // the last extension's error, while none succeeded since
		pending bool  // an extension is out
	)
	for {
		select {
		case <-quit:
			return nil
		case <-ctx.Done():
			return nil
		case <-moved:
			moved = l.untilMoved()
			deadline.Reset(l.remaining())
		case <-deadline.C:
			if r := l.remaining(); r > 0 { // an extension moved the deadline on
				deadline.Reset(r)
				continue
			}
			switch {
			case n >= limit:
				return ErrExtensionsExhausted
			case last != nil:
				return fmt.Errorf("%w: the validity ended with no extension since: %w", ErrLeaseLost, last)
			case !pending:
				// An Extend of the caller's to a shorter TTL brought the
				// deadline before keep's next extension.
				return fmt.Errorf("%w: the validity ended before the next extension was due", ErrLeaseLost)
			}
			return fmt.Errorf("%w: the validity ended before an extension answered", ErrLeaseLost)
		case <-next.C:
			// Not once the validity is over (after a shorter Extend,
			// the next extension can fall due with the deadline): one
			// sent then could only revive the lease after the work went
			// uncovered; the deadline ends the work instead.
			if pending || n >= limit || l.remaining() <= 0 {
				continue
			}
			pending = true
			go func() {
				c, cancel := context.WithTimeout(ectx, interval)
				defer cancel()
				results <- l.Extend(c, l.ttl)
			}()
		case err := <-results:
			pending = false
			opts.observe(ctx, Event{Kind: EventExtended, Name: l.name, Fence: l.fence, Err: err})
			if opts.OnExtend != nil {
				opts.OnExtend(l, err)
			}
			switch {
			case err == nil:
				n++
				last = nil
				deadline.Reset(l.remaining())
			case errors.Is(err, ErrLeaseLost):
				return err
			default:
				last = err
			}
			if n < limit {
				next.Reset(min(interval, max(l.remaining(), time.Millisecond)))
			}
		}
	}
}

// using runs fn under a lease that acquire takes: the one implementation of
// [Client.Using] and [Quorum.Using].
func using(ctx context.Context, ttl time.Duration, acquire func() (*Lease, error), fn func(ctx context.Context, l *Lease) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidOptions)
	}
	l, err := acquire()
	if err != nil {
		return err
	}
	kctx, stop := l.KeepAlive(ctx)
	if kctx.Err() != nil && errors.Is(context.Cause(kctx), ErrLeaseLost) {
		// The validity ended between the acquisition and now: fn does
		// not start under a lease that another holder may have.
		return stop()
	}
	began := time.Now()
	fnErr := fn(kctx, l)
	l.b.options().observe(ctx, Event{Kind: EventWork, Name: l.name, Fence: l.fence, Duration: time.Since(began), Err: fnErr})
	if lost := stop(); lost != nil {
		// The validity is over or the lease is gone: there is nothing
		// that is surely ours left to release, and fn must not wait for
		// a server that may not answer.
		return errors.Join(fnErr, lost)
	}
	relErr := releaseWithin(ctx, l, releaseTimeout(ttl))
	if errors.Is(relErr, ErrLeaseLost) {
		return errors.Join(fnErr, ErrLeaseLost)
	}
	return errors.Join(fnErr, relErr)
}

// releaseWithin releases l under a context detached from ctx's
// cancellation and bounded by d. The bound is the releaser's own, not its
// caller's: a release that has not answered within it failed as a step
// past its budget does ([ErrUnavailable], [ErrRedisTimeout]), not with a
// context error the caller never set.
func releaseWithin(ctx context.Context, l *Lease, d time.Duration) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	err := l.Release(rctx)
	if err != nil && ended(rctx) && !errors.Is(err, ErrLeaseLost) && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: release %q: %w (%s release timeout): %w", ErrUnavailable, l.name, ErrRedisTimeout, d, err)
	}
	return err
}

// Using acquires the lease on name, runs fn while holding it, extends it in
// the background (see [Lease.KeepAlive]), and releases it when fn returns.
// fn's context is cancelled at the lease's validity deadline unless an
// extension moved it on, and as soon as an extension finds the lease lost;
// Using then returns, once fn has, an error matching [ErrLeaseLost] (or
// [ErrExtensionsExhausted]) joined with fn's own error, without releasing.
// The deadline comes before the lease can end in Redis by the clock drift
// allowance (1% of the TTL plus 2ms): fn must return within it after its
// context is cancelled, or fence its writes with [Lease.Fence]. When the
// lease is busy, fn does not run and Using returns a [*BusyError]; nor does
// it run when the lease's validity has ended by the time fn would start (a
// grant that answered late, a pause): Using returns an error matching
// [ErrLeaseLost].
func (c *Client) Using(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error) error {
	return using(ctx, ttl, func() (*Lease, error) { return c.Acquire(ctx, name, ttl) }, fn)
}

func releaseTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl, 100*time.Millisecond), 5*time.Second)
}
