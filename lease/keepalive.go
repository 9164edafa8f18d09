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
// context is ctx, cancelled with cause [ErrLeaseLost] when an extension finds
// the lease gone (or none succeeds for a whole TTL), and with
// [ErrExtensionsExhausted] when the lease runs out after the last extension.
// stop ends the background work, waits for it, and returns that cause, or nil
// while the lease is still held. stop is safe to call more than once.
func (l *Lease) KeepAlive(ctx context.Context) (context.Context, func() error) {
	return l.keepAlive(ctx, l.b.options().MaxExtensions)
}

// keepAlive is KeepAlive with at most limit extensions.
func (l *Lease) keepAlive(ctx context.Context, limit int) (context.Context, func() error) {
	kctx, cancel := context.WithCancelCause(ctx)
	opts := l.b.options()
	interval := opts.ExtendInterval
	if interval <= 0 {
		interval = l.ttl / 3
	}
	interval = max(interval, time.Millisecond)
	quit := make(chan struct{})
	done := make(chan struct{})
	var lost error
	go func() {
		defer close(done)
		lost = l.keep(kctx, quit, interval, limit)
		if lost != nil {
			opts.observe(ctx, Event{Kind: EventLost, Name: l.name, Fence: l.fence, Err: lost})
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
func (l *Lease) keep(ctx context.Context, quit <-chan struct{}, interval time.Duration, limit int) error {
	opts := l.b.options()
	t := time.NewTimer(min(interval, max(l.remaining(), time.Millisecond)))
	defer t.Stop()
	for n := 0; ; {
		if n >= limit {
			// No more extensions: the lease runs out at its TTL.
			t.Reset(l.remaining())
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
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
		err := l.Extend(ectx, l.ttl)
		ecancel()
		opts.observe(ctx, Event{Kind: EventExtended, Name: l.name, Fence: l.fence, Err: err})
		if opts.OnExtend != nil {
			opts.OnExtend(l, err)
		}
		switch {
		case err == nil:
			n++
		case errors.Is(err, ErrLeaseLost):
			return ErrLeaseLost
		case l.remaining() <= 0:
			// Redis did not answer for a whole TTL: assume the lease is gone.
			return fmt.Errorf("%w: %w", ErrLeaseLost, err)
		}
		t.Reset(min(interval, max(l.remaining(), time.Millisecond)))
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
	began := time.Now()
	fnErr := fn(kctx, l)
	l.b.options().observe(ctx, Event{Kind: EventWork, Name: l.name, Fence: l.fence, Duration: time.Since(began), Err: fnErr})
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

// Using acquires the lease on name, runs fn while holding it, extends it in
// the background (see [Lease.KeepAlive]), and releases it when fn returns.
// fn's context is cancelled when the lease is lost; Using then returns an
// error matching [ErrLeaseLost] (or [ErrExtensionsExhausted]) joined with
// fn's own error. When the lease is busy, fn does not run and Using returns
// a [*BusyError].
func (c *Client) Using(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error) error {
	return using(ctx, ttl, func() (*Lease, error) { return c.Acquire(ctx, name, ttl) }, fn)
}

func releaseTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl, 100*time.Millisecond), 5*time.Second)
}
