package lease_test

import (
	"context"
	"testing"
	"time"
)

// bound is how long a test waits for something that must happen before it
// fails: a bound on a failure, never a synchronisation. Every wait in these
// tests has one, so that a breakage fails fast instead of hanging.
const bound = 10 * time.Second

// recv receives from ch, failing the test when nothing comes within bound.
// It must run on the test's goroutine.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bound):
		t.Fatalf("%s: nothing within %s", what, bound)
		panic("unreachable")
	}
}

// waitCtx waits for ctx to be done, at most bound; on any goroutine, it
// reports a failure and returns false when ctx is not done in time.
func waitCtx(t *testing.T, ctx context.Context, what string) bool {
	t.Helper()
	select {
	case <-ctx.Done():
		return true
	case <-time.After(bound):
		t.Errorf("%s: not cancelled within %s", what, bound)
		return false
	}
}
