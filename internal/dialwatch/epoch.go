package dialwatch

import "context"

// Epoch is the span between two failed dials of a client: it ends, with
// the failed dial's error (a [*Failure]) as its cause, at the client's next
// failed dial, when its owner calls End and starts a new one. A step
// records the epoch it began in and stops waiting when that epoch ends,
// unless Redis answered the client since the step began (another path's
// dial failed).
type Epoch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// NewEpoch starts an epoch.
func NewEpoch() *Epoch {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Epoch{ctx: ctx, cancel: cancel}
}

// Done is closed when the epoch ends.
func (e *Epoch) Done() <-chan struct{} { return e.ctx.Done() }

// Ended reports whether the epoch ended.
func (e *Epoch) Ended() bool { return e.ctx.Err() != nil }

// Cause is the failed dial that ended the epoch: a [*Failure]; nil while
// it lasts.
func (e *Epoch) Cause() error {
	if !e.Ended() {
		return nil
	}
	return context.Cause(e.ctx)
}

// End ends the epoch with the failed dial's error err.
func (e *Epoch) End(err error) { e.cancel(&Failure{err}) }

// Failure is a failed dial of a client, as its [Hook] saw it: not one
// whose own context ended, not a dial timeout (a black hole, found by a
// budget). It reads as the dial's error and unwraps to it.
type Failure struct{ Err error }

func (e *Failure) Error() string { return e.Err.Error() }

// Unwrap returns the dial's error.
func (e *Failure) Unwrap() error { return e.Err }
