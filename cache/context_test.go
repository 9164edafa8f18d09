package cache_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestFirstCallerCancelledOthersStillServed(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{})
	o := &origin[string]{value: "v", started: make(chan struct{}, 1), release: make(chan struct{})}
	ctx1, cancel1 := context.WithCancel(context.Background())
	first := make(chan error)
	go func() {
		_, err := c.GetOrCompute(ctx1, "k", o.fn)
		first <- err
	}()
	<-o.started
	const n = 20
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			r, err := c.Fetch(context.Background(), "k", o.fn)
			if err != nil || r.Value != "v" || r.Outcome != cache.Shared {
				t.Errorf("waiter: %+v %v", r, err)
			}
		})
	}
	leakcheck.WaitBlocked(t, doFrame, n+1, 10*time.Second)
	cancel1()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller: %v", err)
	}
	close(o.release)
	wg.Wait()
	if o.calls.Load() != 1 {
		t.Fatalf("origin ran %d times", o.calls.Load())
	}
}

// Every caller gives up: the compute still finishes and fills, so the next
// caller hits instead of recomputing.
func TestEveryCallerCancelledComputeStillFills(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{})
	o := &origin[string]{value: "v", started: make(chan struct{}, 1), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if _, err := c.GetOrCompute(ctx, "k", o.fn); !errors.Is(err, context.Canceled) {
				t.Errorf("err=%v", err)
			}
		})
	}
	leakcheck.WaitBlocked(t, doFrame, 10, 10*time.Second)
	cancel()
	wg.Wait()
	close(o.release)
	// The abandoned compute fills; a new caller either joins it or hits.
	r, err := c.Fetch(context.Background(), "k", o.fn)
	if err != nil || r.Value != "v" || o.calls.Load() != 1 {
		t.Fatalf("%+v %v calls=%d", r, err, o.calls.Load())
	}
}

// fn ignores its context: a caller's deadline still ends that caller's wait
// at once, and ComputeTimeout is what fn's context carries.
func TestFnIgnoringContext(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{ComputeTimeout: time.Hour})
	release := make(chan struct{})
	sawDeadline := make(chan bool, 1)
	fn := func(ctx context.Context) (string, error) {
		_, ok := ctx.Deadline()
		sawDeadline <- ok
		<-release // ignores ctx
		return "late", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.GetOrCompute(ctx, "k", fn); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err=%v, want DeadlineExceeded", err)
	}
	if !<-sawDeadline {
		t.Fatal("fn's context has no ComputeTimeout deadline")
	}
	close(release)
	r, err := c.Fetch(context.Background(), "k", func(context.Context) (string, error) { return "", errors.New("must not run") })
	if err != nil || r.Value != "late" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestComputeTimeoutBoundsFn(t *testing.T) {
	c := newCache[int](t, redistest.Client(t), cache.Options{ComputeTimeout: 20 * time.Millisecond})
	_, err := c.GetOrCompute(context.Background(), "k", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err=%v", err)
	}
}

type traceKey struct{}

func TestCallerValuesReachFn(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{})
	ctx := context.WithValue(context.Background(), traceKey{}, "trace-7")
	v, err := c.GetOrCompute(ctx, "k", func(ctx context.Context) (string, error) {
		s, _ := ctx.Value(traceKey{}).(string)
		return s, nil
	})
	if err != nil || v != "trace-7" {
		t.Fatalf("%q %v", v, err)
	}
}
