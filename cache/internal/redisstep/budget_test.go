package redisstep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Only a connection closed or reset under a step counts as broken: not a
// reply, not a timeout, not success.
func TestBrokenConnIsAClosedOrResetConnectionOnly(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{redis.Nil, false},
		{context.DeadlineExceeded, false},
		{errors.New("boom"), false},
		{io.EOF, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
	} {
		if got := BrokenConn(tc.err); got != tc.want {
			t.Errorf("BrokenConn(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A step that failed on a broken connection runs again, at most once per
// idle pooled connection, and stops at the first other outcome.
func TestAStepOnABrokenConnectionRunsAgainOncePerIdleConnection(t *testing.T) {
	for _, tc := range []struct {
		idle, broken, wantRuns int
		wantErr                error
	}{
		{idle: 0, broken: 5, wantRuns: 1, wantErr: io.EOF},
		{idle: 2, broken: 1, wantRuns: 2, wantErr: nil},
		{idle: 2, broken: 5, wantRuns: 3, wantErr: io.EOF},
	} {
		b := Budget{idle: func() int { return tc.idle }}
		runs := 0
		v, err := Run(context.Background(), b, func(context.Context) (int, error) {
			runs++
			if runs <= tc.broken {
				return 0, io.EOF
			}
			return runs, nil
		})
		if runs != tc.wantRuns || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("idle %d, %d broken: %d runs, %v, %v; want %d runs, %v", tc.idle, tc.broken, runs, v, err, tc.wantRuns, tc.wantErr)
		}
	}
}

// With no budget of its own (RedisTimeout 0) a step runs on the caller's
// goroutine with the caller's context, and Bound leaves the context as it
// is.
func TestNoBudgetRunsTheStepAsItIs(t *testing.T) {
	var b Budget
	ctx := context.WithValue(context.Background(), callerKey{}, "caller")
	got, err := Run(ctx, b, func(c context.Context) (string, error) {
		if c != ctx {
			return "", errors.New("the step got another context")
		}
		return "ok", nil
	})
	if got != "ok" || err != nil {
		t.Fatalf("Run with no budget: %q, %v", got, err)
	}
	if bctx, cancel := b.Bound(ctx); bctx != ctx {
		cancel()
		t.Fatal("Bound with no budget changed the context")
	}
	if b.Longest() != 0 || !b.Calm() || b.Timeout() != 0 {
		t.Fatalf("no budget: longest %s, calm %v, timeout %s", b.Longest(), b.Calm(), b.Timeout())
	}
}

// callerKey marks the caller's context.
type callerKey struct{}
