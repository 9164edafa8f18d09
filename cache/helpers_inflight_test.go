package cache_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// The tools of the in-flight invalidation tests (invalidate_inflight_test.go):
// a compute and a codec that block until released, and the checks of what
// the callers joined and were served.

const inflightKey = "k"

// twoPhase is a tagged compute function whose first call blocks until
// released and answers "old"; every later call answers "new" at once. The
// first call is what an invalidation must not let through.
type twoPhase struct {
	calls   atomic.Int32
	started chan struct{} // receives when the first call began
	release chan struct{}
	once    sync.Once
}

func newTwoPhase(t testing.TB) *twoPhase {
	o := &twoPhase{started: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(o.Release)
	return o
}

func (o *twoPhase) Release() { o.once.Do(func() { close(o.release) }) }

func (o *twoPhase) fn(ctx context.Context) (string, error) {
	if err := cache.SetTags(ctx, "t"); err != nil {
		return "", err
	}
	if o.calls.Add(1) > 1 {
		return "new", nil
	}
	o.started <- struct{}{}
	select {
	case <-o.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return "old", nil
}

func (o *twoPhase) batch(ctx context.Context, keys []string) (map[string]string, error) {
	v, err := o.fn(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = v
	}
	return out, nil
}

// gateCodec is the default codec for strings (raw bytes), whose Marshal of
// the value "old" blocks until released: a fill that is slow to encode
// (a large value, a slow codec), and so slow to end.
type gateCodec struct {
	encoding chan struct{} // receives when the encoding of "old" began
	release  chan struct{}
	once     sync.Once
}

func newGateCodec(t testing.TB) *gateCodec {
	g := &gateCodec{encoding: make(chan struct{}, 16), release: make(chan struct{})}
	t.Cleanup(g.Release)
	return g
}

func (g *gateCodec) Release() { g.once.Do(func() { close(g.release) }) }

func (g *gateCodec) Marshal(v any) ([]byte, error) {
	s, ok := v.(*string)
	if !ok {
		return nil, fmt.Errorf("gateCodec: %T", v)
	}
	if *s == "old" {
		select {
		case g.encoding <- struct{}{}:
		default:
		}
		<-g.release // released by the test, or at its cleanup
	}
	return []byte(*s), nil
}

func (g *gateCodec) Unmarshal(data []byte, v any) error {
	s, ok := v.(*string)
	if !ok {
		return fmt.Errorf("gateCodec: %T", v)
	}
	*s = string(data)
	return nil
}

// sharers counts the callers of the test's processes waiting on a shared
// load (singleflight): those that started one and those that joined one.
func sharers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "stampede/singleflight.(*Group[...]).Do(") && strings.Contains(g, "stampede/cache.(*Cache[...]).coalesce(") {
			n++
		}
	}
	return n
}

// joinLoad starts call, which must join a load of its key in flight in its
// process (a caller that begins while one is in flight joins it), and
// returns once it has: then the load can be let go. before is [sharers]
// before call started.
func joinLoad[T any](t testing.TB, call func() T) <-chan timed[T] {
	t.Helper()
	before := sharers()
	ch := async(call)
	eventually(t, 10*time.Second, func() bool { return sharers() > before }, func() string {
		return fmt.Sprintf("the call did not join the load in flight (%d callers waiting on shared loads, %d before it)", sharers(), before)
	})
	return ch
}

// fetched is a call's Result and error.
type fetched struct {
	r   cache.Result[string]
	err error
}

// checkNotOld fails the test unless the call was answered with a value
// computed after the invalidation: "new", or one of also.
func checkNotOld(t testing.TB, who string, f fetched, also ...string) {
	t.Helper()
	switch {
	case f.err != nil:
		t.Errorf("%s: %v", who, f.err)
	case f.r.Value == "old":
		t.Errorf("%s: %q (%v): the value computed before the invalidation was served after it returned", who, f.r.Value, f.r.Outcome)
	case f.r.Value != "new" && !slices.Contains(also, f.r.Value):
		t.Errorf("%s: %q (%v), want \"new\" or one of %q", who, f.r.Value, f.r.Outcome, also)
	}
}
