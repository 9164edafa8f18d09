package singleflight

import (
	"context"
	"runtime/debug"
)

// Outcome is what one run of a function returned.
type Outcome[V any] struct {
	Value V
	Err   error
}

// Go runs fn(ctx) on a goroutine of its own and delivers its outcome on the
// returned channel, which is buffered: the goroutine never blocks on it, so
// a caller may stop waiting. A panic in fn becomes a *PanicError with its
// stack, and runtime.Goexit becomes [ErrGoexit]: neither escapes into the
// caller, and the channel always receives exactly one outcome.
func Go[V any](ctx context.Context, fn func(context.Context) (V, error)) <-chan Outcome[V] {
	done := make(chan Outcome[V], 1)
	go func() {
		var o Outcome[V]
		normal := false
		defer func() {
			if !normal {
				if r := recover(); r != nil {
					o.Err = &PanicError{Value: r, Stack: debug.Stack()}
				} else {
					o.Err = ErrGoexit
				}
			}
			done <- o
		}()
		o.Value, o.Err = fn(ctx)
		normal = true
	}()
	return done
}
