package singleflight

import (
	"context"
	"time"

	xsf "golang.org/x/sync/singleflight"
)

// Group coalesces concurrent calls for the same key. The zero value is ready
// to use, with no timeout. A Group is safe for concurrent use and must not be
// copied after first use.
type Group[V any] struct {
	// Timeout bounds each shared call of fn. Zero means no bound beyond the
	// deadline of the first caller's context, which is dropped with its
	// cancellation. Set it before first use.
	Timeout time.Duration

	g xsf.Group
}

type outcome[V any] struct {
	v   V
	err error
}

// Do calls fn once for all concurrent callers with the same key and returns
// its result to each of them. shared reports whether the result was handed
// to more than one caller.
//
// fn runs with a context detached from the callers' cancellation that keeps
// the first caller's values and is bounded by [Group.Timeout]. ctx bounds
// only this caller's wait: when it is done, Do returns ctx's error at once,
// and the call goes on for the other callers.
func (g *Group[V]) Do(ctx context.Context, key string, fn func(context.Context) (V, error)) (v V, shared bool, err error) {
	if err := ctx.Err(); err != nil {
		return v, false, err
	}
	ch := g.g.DoChan(key, func() (any, error) {
		o := g.call(ctx, fn)
		return o, nil
	})
	select {
	case r := <-ch:
		o := r.Val.(outcome[V])
		return o.v, r.Shared, o.err
	case <-ctx.Done():
		return v, false, context.Cause(ctx)
	}
}

// Forget tells the Group to forget key: the next Do for key calls fn again
// instead of joining a call in flight.
func (g *Group[V]) Forget(key string) { g.g.Forget(key) }

// call runs fn in a goroutine of its own, so that neither a panic nor
// runtime.Goexit in fn can escape into x/sync (which re-panics panics in a
// new goroutine and leaves DoChan callers waiting forever on Goexit).
func (g *Group[V]) call(ctx context.Context, fn func(context.Context) (V, error)) outcome[V] {
	cctx := context.WithoutCancel(ctx)
	cancel := context.CancelFunc(func() {})
	if g.Timeout > 0 {
		cctx, cancel = context.WithTimeout(cctx, g.Timeout)
	}
	defer cancel()

	o := <-Go(cctx, fn)
	return outcome[V]{v: o.Value, err: o.Err}
}
