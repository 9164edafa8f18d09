package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
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
	wg.Go(func() { first, _ = g.do(ctx, "k", get) })
	<-started // the first caller's GET is in flight

	// A caller that joins it sends nothing: with its context already
	// cancelled it leaves at once, with the cancellation.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := g.do(cancelled, "k", get); !errors.Is(err, context.Canceled) {
		t.Fatalf("a joiner whose context ended: %v, want context.Canceled", err)
	}
	if n := gets.Load(); n != 1 {
		t.Fatalf("%d GETs after a caller joined the one in flight, want 1", n)
	}

	g.forget("k")
	wg.Go(func() { second, _ = g.do(ctx, "k", get) })
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
	if _, err := g.do(ctx, "k", get); !errors.Is(err, cause) {
		t.Fatalf("err %v, want the context's cause", err)
	}
}
