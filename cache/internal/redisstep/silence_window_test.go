package redisstep

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/dialwatch"
)

var errTestBudget = errors.New("test: step past its budget")

// healthOf returns a budget of floor (RedisTimeout) and ceil (WaitTimeout)
// with a link of its own, whose clock began a minute ago.
func healthOf(floor, ceil time.Duration) Budget {
	l := &link{base: time.Now().Add(-time.Minute)}
	l.epoch.Store(dialwatch.NewEpoch())
	return Budget{d: floor, h: &redisHealth{floor: floor, ceil: ceil, errTimeout: errTestBudget, link: l}}
}

// burstyRedis feeds b what a Redis busy in bursts of burst shows a client:
// one reply that waited a whole burst, then a run of quick replies (the
// steps queued behind it), which bring the budget down to its floor.
func burstyRedis(t *testing.T, b Budget, burst time.Duration) {
	t.Helper()
	b.h.replied(burst)
	for range 40 {
		b.h.replied(time.Millisecond)
	}
	if got := b.Step(); got != b.d {
		t.Fatalf("after the quick replies the budget is %s, want its floor %s", got, b.d)
	}
}

// quietStep is a step that Redis answers after quiet, with nothing from
// Redis meanwhile.
func quietStep(quiet time.Duration) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		time.Sleep(quiet)
		return "v", nil
	}
}

// A Redis busy in bursts answers each burst's queue at once, then nothing
// for a whole burst: the quick replies between bursts lower the budget
// below a burst, yet a quiet no longer than the burst Redis was just seen
// to come out of is load, and the step is waited for (issue 39: under a
// loaded machine such bursts degraded callers of a Redis that answered).
func TestAQuietNoLongerThanARecentSlowReplyIsWaitedFor(t *testing.T) {
	const floor, burst, quiet = 50 * time.Millisecond, 400 * time.Millisecond, 120 * time.Millisecond
	b := healthOf(floor, 5*time.Second)
	burstyRedis(t, b, burst)
	start := time.Now()
	v, err := Run(context.Background(), b, quietStep(quiet))
	if err != nil || v != "v" {
		t.Fatalf("a step quiet for %s, within the %s burst Redis just came out of, with a budget of %s: %q, %v after %s; want its reply",
			quiet, burst, floor, v, err, time.Since(start))
	}
}

// The outage path is kept: with no slow reply lately, or with the last one
// longer ago than WaitTimeout, a step that hears nothing for its budget
// fails as silent at that budget.
func TestAQuietPastTheBudgetWithoutARecentSlowReplyIsSilence(t *testing.T) {
	const floor, ceil = 50 * time.Millisecond, 200 * time.Millisecond
	for _, tc := range []struct {
		name string
		prep func(t *testing.T, b Budget)
	}{
		{"quick replies only", func(t *testing.T, b Budget) {
			for range 40 {
				b.h.replied(time.Millisecond)
			}
		}},
		{"the last slow reply before WaitTimeout", func(t *testing.T, b Budget) {
			burstyRedis(t, b, 150*time.Millisecond)
			b.h.slowAt.Store(b.h.slowAt.Load() - int64(2*ceil))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := healthOf(floor, ceil)
			tc.prep(t, b)
			release := make(chan struct{})
			defer close(release)
			start := time.Now()
			_, err := Run(context.Background(), b, func(context.Context) (string, error) {
				<-release // a silent Redis
				return "", context.Canceled
			})
			took := time.Since(start)
			if !errors.Is(err, errTestBudget) {
				t.Fatalf("a silent Redis: %v after %s, want the budget's error", err, took)
			}
			// One budget, a second one only if this process was too
			// starved to judge (its timer fired late).
			if took >= 3*floor {
				t.Errorf("a silent Redis cost %s, want about one budget (%s)", took, floor)
			}
		})
	}
}
