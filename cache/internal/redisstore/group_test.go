package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A shared read of a key joins the GET in flight instead of sending its
// own; a read that starts after forget sends a GET of its own; every
// caller gets its GET's reply.
func TestGroupSharesOneGETPerKey(t *testing.T) {
	var g readGroup
	var gets atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	get := func(_ context.Context, key string) (Reply, error) {
		n := gets.Add(1)
		started <- struct{}{}
		<-release
		return Reply{Envelope: fmt.Sprintf("env:%s:%d", key, n), Found: true}, nil
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	var first, second Reply
	wg.Go(func() { first, _, _ = g.do(ctx, "k", get) })
	<-started // the first caller's GET is in flight

	// A caller that joins it sends nothing: with its context already
	// cancelled it leaves at once, with the cancellation.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := g.do(cancelled, "k", get); !errors.Is(err, context.Canceled) {
		t.Fatalf("a joiner whose context ended: %v, want context.Canceled", err)
	}
	if n := gets.Load(); n != 1 {
		t.Fatalf("%d GETs after a caller joined the one in flight, want 1", n)
	}

	g.forget("k")
	wg.Go(func() { second, _, _ = g.do(ctx, "k", get) })
	<-started // a read after forget sent a GET of its own
	close(release)
	wg.Wait()
	if first.Envelope != "env:k:1" || second.Envelope != "env:k:2" {
		t.Fatalf("replies %+v and %+v, want each its own GET's", first, second)
	}
	g.mu.Lock()
	left := len(g.flights)
	g.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d flights left", left)
	}
}

// A caller whose deadline comes before the GET's bound stops waiting at
// its deadline, with its context's cause; the GET goes on for the others.
func TestGroupCallerLeavesAtItsDeadline(t *testing.T) {
	g := readGroup{within: time.Hour}
	release := make(chan struct{})
	defer close(release)
	get := func(context.Context, string) (Reply, error) {
		<-release
		return Reply{Found: true}, nil
	}
	cause := errors.New("test: caller's deadline")
	ctx, cancel := context.WithDeadlineCause(context.Background(), time.Now().Add(20*time.Millisecond), cause)
	defer cancel()
	if _, _, err := g.do(ctx, "k", get); !errors.Is(err, cause) {
		t.Fatalf("err %v, want the context's cause", err)
	}
}

// The reading a GET hands its callers (the hit path judges on it) is one
// for all of them, taken after the reply came and after each caller began,
// the last joiner's too. In a synctest bubble, whose clock moves only by
// the test's sleeps: each caller begins a millisecond after the one before,
// and each has joined (is blocked) before the next begins. A failed GET
// hands none.
func TestGroupReadingIsAfterEveryCallersStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g readGroup
		release := make(chan struct{})
		var fail bool
		var replied time.Time
		get := func(context.Context, string) (Reply, error) {
			<-release
			replied = time.Now()
			if fail {
				return Reply{}, errors.New("test: GET failed")
			}
			return Reply{Found: true}, nil
		}
		ctx := context.Background()
		const callers = 4
		var begun, ats [callers]time.Time
		var wg sync.WaitGroup
		for i := range callers {
			time.Sleep(time.Millisecond)
			begun[i] = time.Now()
			wg.Go(func() { _, ats[i], _ = g.do(ctx, "k", get) })
			synctest.Wait() // the first in its GET, the others waiting for it
		}
		time.Sleep(time.Millisecond)
		close(release)
		wg.Wait()
		for i, at := range ats {
			if at.Before(begun[i]) || at.Before(replied) {
				t.Fatalf("caller %d began at %v, the GET returned at %v, its reading is %v", i, begun[i], replied, at)
			}
			if !at.Equal(ats[0]) {
				t.Fatalf("caller %d's reading %v differs from the first's %v", i, at, ats[0])
			}
		}

		fail = true
		if _, at, err := g.do(ctx, "k", get); err == nil || !at.IsZero() {
			t.Fatalf("a failed GET: err %v, reading %v (want an error and none)", err, at)
		}
	})
}
