package redisstep

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// errSentinel stands for cache.ErrRedisTimeout, which cache hands in.
var errSentinel = errors.New("test: step past its budget")

// testHealth returns a health of its own client (never dialled: the
// client is only the key its observations are shared under).
func testHealth(t *testing.T, floor, ceil time.Duration) (*redisHealth, redis.UniversalClient) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	h := newRedisHealth(floor, ceil, rdb, errSentinel)
	t.Cleanup(func() {
		h.release(rdb)
		rdb.Close()
	})
	return h, rdb
}

// The budget is the floor before any reply (an outage from the start costs
// each call one RedisTimeout, not two: issue 39), the floor while Redis
// answers well within it, follows a slow round trip up, and never passes
// the ceiling.
func TestBudgetFollowsTheRoundTripWithinFloorAndCeiling(t *testing.T) {
	h, _ := testHealth(t, 10*time.Millisecond, time.Second)
	if got := h.rto(); got != 10*time.Millisecond {
		t.Fatalf("before any reply: %s, want the floor (10ms)", got)
	}
	h.sample(time.Millisecond)
	if got := h.rto(); got != 10*time.Millisecond {
		t.Fatalf("after a 1ms round trip: %s, want the floor (10ms)", got)
	}
	h.sample(100 * time.Millisecond)
	h.sample(100 * time.Millisecond)
	if got := h.rto(); got <= 100*time.Millisecond || got >= time.Second {
		t.Fatalf("after 100ms round trips: %s, want above 100ms and below the ceiling", got)
	}
	h.sample(10 * time.Second)
	if got := h.rto(); got != time.Second {
		t.Fatalf("after a 10s round trip: %s, want the ceiling (1s)", got)
	}
}

// Expect is the budget's estimate without its floor: 0 before a reply,
// below the floor while Redis answers fast, at least twice a slow round
// trip, and never past the ceiling.
func TestExpectIsTheEstimateWithoutTheFloor(t *testing.T) {
	h, _ := testHealth(t, 250*time.Millisecond, time.Second)
	if got := h.expect(); got != 0 {
		t.Fatalf("before any reply: %s, want 0", got)
	}
	h.sample(time.Millisecond)
	if got := h.expect(); got <= 0 || got >= 250*time.Millisecond {
		t.Fatalf("after a 1ms round trip: %s, want above 0 and below the floor", got)
	}
	for range 8 {
		h.sample(300 * time.Millisecond)
	}
	if got := h.expect(); got < 500*time.Millisecond || got > time.Second {
		t.Fatalf("after 300ms round trips: %s, want about twice the round trip", got)
	}
	h.sample(10 * time.Second)
	if got := h.expect(); got != time.Second {
		t.Fatalf("after a 10s round trip: %s, want the ceiling (1s)", got)
	}
}

// Caches on one client share what they observe of Redis; each keeps its
// own bounds, and the last one's release forgets the client.
func TestCachesOfOneClientShareTheirObservations(t *testing.T) {
	a, rdb := testHealth(t, 10*time.Millisecond, time.Second)
	b := newRedisHealth(50*time.Millisecond, 2*time.Second, rdb, errSentinel)
	if a.link != b.link {
		t.Fatal("two caches of one client observe Redis apart")
	}
	a.replied(time.Millisecond)
	if !b.answering(time.Hour) {
		t.Fatal("a reply to one cache is not seen by the other")
	}
	if got := b.rto(); got != 50*time.Millisecond {
		t.Fatalf("the second cache's budget %s, want its own floor (50ms)", got)
	}
	b.release(rdb)
	links.Lock()
	_, kept := links.m[rdb]
	links.Unlock()
	if !kept {
		t.Fatal("one cache's release dropped a link another cache still uses")
	}
}

// A step past its budget matches the sentinel cache handed in and what
// ended it; it is load, not an outage, only while Redis answers.
func TestAStepPastItsBudgetIsLoadOnlyWhileRedisAnswers(t *testing.T) {
	h, _ := testHealth(t, time.Hour, time.Hour)
	b := Budget{d: time.Hour, h: h}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	silent := b.explain(context.Background(), ended, context.DeadlineExceeded, time.Hour)
	if !errors.Is(silent, errSentinel) || !errors.Is(silent, context.DeadlineExceeded) || UnderLoad(silent) {
		t.Fatalf("Redis silent: %v; want the sentinel and DeadlineExceeded, not load", silent)
	}
	h.replied(time.Millisecond)
	slow := b.explain(context.Background(), ended, context.DeadlineExceeded, time.Hour)
	if !errors.Is(slow, errSentinel) || !errors.Is(slow, context.DeadlineExceeded) || !UnderLoad(slow) {
		t.Fatalf("Redis answering: %v; want the sentinel, DeadlineExceeded and load", slow)
	}
	if want := "test: step past its budget (1h0m0s): context deadline exceeded (" + errRedisLoad.Error() + ")"; slow.Error() != want {
		t.Fatalf("load error reads %q, want %q", slow.Error(), want)
	}
	// The caller's own context ended: its error, as it is.
	if err := b.explain(ended, ended, context.Canceled, time.Hour); err != context.Canceled {
		t.Fatalf("caller's context ended: %v, want context.Canceled as it is", err)
	}
	// Redis' own reply, even within an ended budget, is no failure of Redis.
	if err := b.explain(context.Background(), ended, redis.Nil, time.Hour); err != redis.Nil {
		t.Fatalf("a reply: %v, want redis.Nil as it is", err)
	}
}

// A go-redis timeout within the budget is load while Redis answers; a
// failed dial never is.
func TestATimeoutWhileRedisAnswersIsLoadAndAFailedDialIsNot(t *testing.T) {
	h, _ := testHealth(t, time.Hour, time.Hour)
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}}
	if UnderLoad(h.loadFailure(timeout)) {
		t.Fatal("a read timeout with no reply yet was taken for load")
	}
	h.replied(time.Millisecond)
	if err := h.loadFailure(timeout); !UnderLoad(err) || !errors.Is(err, timeout) {
		t.Fatalf("a read timeout while Redis answers: %v, want load matching the timeout", err)
	}
	if err := h.loadFailure(redis.ErrPoolTimeout); !UnderLoad(err) {
		t.Fatalf("a pool wait while Redis answers: %v, want load", err)
	}
	if err := h.loadFailure(dial); UnderLoad(err) {
		t.Fatalf("a failed dial: %v, taken for load", err)
	}
	if err := h.loadFailure(errors.New("boom")); UnderLoad(err) {
		t.Fatalf("an error that is no timeout: %v, taken for load", err)
	}
}

// timeoutError is a net.Error that timed out.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// An answer heard outside the steps (a heartbeat) shows Redis answering
// and raises the round trip the budget follows, never lowers it.
func TestHeardRaisesTheBudgetOnly(t *testing.T) {
	h, _ := testHealth(t, 100*time.Millisecond, 10*time.Second)
	if h.answering(time.Second) {
		t.Fatal("answering before any reply")
	}
	h.heard(400 * time.Millisecond)
	if !h.answering(time.Second) {
		t.Error("a heartbeat's answer does not count as Redis answering")
	}
	raised := h.rto()
	if raised < 800*time.Millisecond {
		t.Errorf("budget %s after a 400 ms answer, want at least twice it", raised)
	}
	h.heard(time.Millisecond)
	if got := h.rto(); got != raised {
		t.Errorf("a fast heartbeat moved the budget from %s to %s; only the steps' replies lower it", raised, got)
	}
	for range 40 {
		h.replied(time.Millisecond)
	}
	if got := h.rto(); got >= raised {
		t.Errorf("the steps' fast replies left the budget at %s", got)
	}
}
