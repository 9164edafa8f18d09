package singleflight_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/singleflight"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

const doFrame = "singleflight.(*Group[...]).Do("

// waitBound bounds every wait of these tests (a channel, a WaitGroup, a
// Do): a breakage of the Group fails the test fast instead of hanging it
// until go test's timeout.
const waitBound = 10 * time.Second

// errWaitBound is the cause of a bounded context's end, so that a test
// tells the bound from a deadline of the Group's own.
var errWaitBound = errors.New("the test's wait bound ran out")

// bounded returns a context that ends after waitBound, for Do calls that
// would block forever on a broken Group.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeoutCause(context.Background(), waitBound, errWaitBound)
	t.Cleanup(cancel)
	return ctx
}

// recv receives from ch, failing the test after waitBound.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitBound):
	}
	t.Fatalf("not within %s: %s", waitBound, what)
	var zero T
	return zero
}

// waitAll waits for wg, failing the test after waitBound.
func waitAll(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	recv(t, done, what)
}

// waitParked waits until n callers are parked inside Do.
func waitParked(t *testing.T, n int) {
	t.Helper()
	leakcheck.WaitBlocked(t, doFrame, n, 10*time.Second)
}

func TestDoCoalesces(t *testing.T) {
	var g singleflight.Group[int]
	var calls atomic.Int32
	release := make(chan struct{})
	const n = 200
	var wg sync.WaitGroup
	vals := make([]int, n)
	shared := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			vals[i], shared[i], errs[i] = g.Do(bounded(t), "k", func(context.Context) (int, error) {
				calls.Add(1)
				<-release
				return 42, nil
			})
		})
	}
	waitParked(t, n)
	close(release)
	waitAll(t, &wg, "the callers to return")
	if c := calls.Load(); c != 1 {
		t.Fatalf("fn ran %d times, want 1", c)
	}
	for i := range n {
		if errs[i] != nil || vals[i] != 42 || !shared[i] {
			t.Fatalf("caller %d: v=%d shared=%v err=%v", i, vals[i], shared[i], errs[i])
		}
	}
}

func TestDistinctKeysDoNotShare(t *testing.T) {
	var g singleflight.Group[string]
	for _, k := range []string{"a", "b", "c"} {
		v, shared, err := g.Do(bounded(t), k, func(context.Context) (string, error) { return k, nil })
		if err != nil || v != k || shared {
			t.Fatalf("key %s: v=%q shared=%v err=%v", k, v, shared, err)
		}
	}
}

func TestFirstCallerCancelledOthersGetValue(t *testing.T) {
	var g singleflight.Group[int]
	release := make(chan struct{})
	fnErr := make(chan error, 1)
	ctx1, cancel1 := context.WithCancel(bounded(t))
	first := make(chan error, 1)
	go func() {
		_, _, err := g.Do(ctx1, "k", func(ctx context.Context) (int, error) {
			<-release
			fnErr <- ctx.Err()
			return 7, nil
		})
		first <- err
	}()
	waitParked(t, 1)
	second := make(chan int, 1)
	go func() {
		v, _, err := g.Do(bounded(t), "k", func(context.Context) (int, error) { return -1, nil })
		if err != nil {
			v = -2
		}
		second <- v
	}()
	waitParked(t, 2)
	cancel1()
	if err := recv(t, first, "the cancelled caller to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller: err=%v, want context.Canceled", err)
	}
	close(release)
	if err := recv(t, fnErr, "fn to end"); err != nil {
		t.Fatalf("shared call's ctx was cancelled with the first caller: %v", err)
	}
	if v := recv(t, second, "the second caller to return"); v != 7 {
		t.Fatalf("second caller got %d, want 7", v)
	}
}

func TestEveryCallerCancelledCallCompletes(t *testing.T) {
	var g singleflight.Group[int]
	var calls atomic.Int32
	release := make(chan struct{})
	finished := make(chan struct{})
	ctx, cancel := context.WithCancel(bounded(t))
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, _, err := g.Do(ctx, "k", func(context.Context) (int, error) {
				calls.Add(1)
				<-release // ignores ctx on purpose
				close(finished)
				return 1, nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err=%v, want context.Canceled", err)
			}
		})
	}
	waitParked(t, 10)
	cancel()
	waitAll(t, &wg, "the cancelled callers to return")
	close(release)
	recv(t, finished, "the abandoned call to end")
	// The key is free again once the abandoned call ends.
	v, _, err := waitFree(t, &g, "k", func(context.Context) (int, error) { calls.Add(1); return 2, nil })
	if err != nil || v != 2 {
		t.Fatalf("after abandoned call: v=%d err=%v", v, err)
	}
	if c := calls.Load(); c != 2 {
		t.Fatalf("calls=%d, want 2", c)
	}
}

// waitFree calls Do until it runs a new call: the previous call's result may
// still be handed out for an instant after fn returned.
func waitFree(t *testing.T, g *singleflight.Group[int], key string, fn func(context.Context) (int, error)) (int, bool, error) {
	t.Helper()
	for range 1000 {
		ran := false
		v, shared, err := g.Do(bounded(t), key, func(ctx context.Context) (int, error) { ran = true; return fn(ctx) })
		if ran {
			return v, shared, err
		}
		runtime.Gosched()
	}
	t.Fatal("key never became free")
	return 0, false, nil
}

func TestCancelledContextBeforeCall(t *testing.T) {
	var g singleflight.Group[int]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	_, _, err := g.Do(ctx, "k", func(context.Context) (int, error) { ran = true; return 1, nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("err=%v ran=%v", err, ran)
	}
}

func TestTimeoutBoundsSharedCall(t *testing.T) {
	g := singleflight.Group[int]{Timeout: 20 * time.Millisecond}
	_, _, err := g.Do(bounded(t), "k", func(ctx context.Context) (int, error) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(waitBound):
			return 0, errWaitBound
		}
	})
	if !errors.Is(err, context.DeadlineExceeded) { // not errWaitBound
		t.Fatalf("err=%v, want DeadlineExceeded", err)
	}
}

type ctxKey struct{}

func TestCallerValuesReachFn(t *testing.T) {
	var g singleflight.Group[string]
	ctx := context.WithValue(bounded(t), ctxKey{}, "trace-1")
	v, _, err := g.Do(ctx, "k", func(ctx context.Context) (string, error) {
		s, _ := ctx.Value(ctxKey{}).(string)
		return s, nil
	})
	if err != nil || v != "trace-1" {
		t.Fatalf("v=%q err=%v", v, err)
	}
}

func TestPanicBecomesErrorForEveryCaller(t *testing.T) {
	var g singleflight.Group[int]
	release := make(chan struct{})
	const n = 50
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, _, errs[i] = g.Do(bounded(t), "k", func(context.Context) (int, error) {
				<-release
				panic("boom")
			})
		})
	}
	waitParked(t, n)
	close(release)
	waitAll(t, &wg, "the callers to return")
	for i, err := range errs {
		var pe *singleflight.PanicError
		if !errors.As(err, &pe) {
			t.Fatalf("caller %d: err=%v, want *PanicError", i, err)
		}
		if pe.Value != "boom" || !strings.Contains(string(pe.Stack), "singleflight_test") {
			t.Fatalf("caller %d: value=%v stack lacks the panicking frame", i, pe.Value)
		}
	}
	v, _, err := waitFree(t, &g, "k", func(context.Context) (int, error) { return 3, nil })
	if err != nil || v != 3 {
		t.Fatalf("after panic: v=%d err=%v", v, err)
	}
}

func TestPanicErrorUnwraps(t *testing.T) {
	var g singleflight.Group[int]
	_, _, err := g.Do(bounded(t), "k", func(context.Context) (int, error) { panic(io.EOF) })
	if !errors.Is(err, io.EOF) {
		t.Fatalf("err=%v, want to unwrap to io.EOF", err)
	}
}

func TestGoexitBecomesError(t *testing.T) {
	var g singleflight.Group[int]
	_, _, err := g.Do(bounded(t), "k", func(context.Context) (int, error) {
		runtime.Goexit()
		return 0, nil
	})
	if !errors.Is(err, singleflight.ErrGoexit) {
		t.Fatalf("err=%v, want ErrGoexit", err)
	}
	v, _, err := waitFree(t, &g, "k", func(context.Context) (int, error) { return 4, nil })
	if err != nil || v != 4 {
		t.Fatalf("after Goexit: v=%d err=%v", v, err)
	}
}

func TestErrorsAreReturnedNotShared(t *testing.T) {
	var g singleflight.Group[int]
	want := errors.New("origin down")
	_, _, err := g.Do(bounded(t), "k", func(context.Context) (int, error) { return 0, want })
	if !errors.Is(err, want) {
		t.Fatalf("err=%v", err)
	}
	v, _, err := waitFree(t, &g, "k", func(context.Context) (int, error) { return 5, nil })
	if err != nil || v != 5 {
		t.Fatalf("after error: v=%d err=%v", v, err)
	}
}

func TestForgetStartsNewCall(t *testing.T) {
	var g singleflight.Group[int]
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = g.Do(bounded(t), "k", func(context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
	}()
	// fn runs only once the call is registered: waiting for parked
	// goroutines instead could count one a previous test left exiting.
	recv(t, started, "the first call to start")
	g.Forget("k")
	// Had Forget not worked, this would join the held call: bounded, it
	// fails instead of hanging.
	v, shared, err := g.Do(bounded(t), "k", func(context.Context) (int, error) { return 2, nil })
	close(release)
	if err != nil || v != 2 || shared {
		t.Fatalf("after Forget: v=%d shared=%v err=%v", v, shared, err)
	}
	recv(t, done, "the first call to return")
}

// Go delivers exactly one outcome: the value, a *PanicError, or ErrGoexit.
func TestGoDeliversEveryEnding(t *testing.T) {
	ctx := context.Background()
	if o := recv(t, singleflight.Go(ctx, func(context.Context) (int, error) { return 7, nil }), "a value"); o.Value != 7 || o.Err != nil {
		t.Fatalf("value: %+v", o)
	}
	var pe *singleflight.PanicError
	if o := recv(t, singleflight.Go(ctx, func(context.Context) (int, error) { panic("boom") }), "a panic"); !errors.As(o.Err, &pe) || pe.Value != "boom" || len(pe.Stack) == 0 {
		t.Fatalf("panic: %+v", o)
	}
	if o := recv(t, singleflight.Go(ctx, func(context.Context) (int, error) { runtime.Goexit(); return 0, nil }), "a Goexit"); !errors.Is(o.Err, singleflight.ErrGoexit) {
		t.Fatalf("Goexit: %+v", o)
	}
}
