package cache_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// The invalidation fence on the paths beside a lead's compute, shared by
// the callers of its process (singleflight): here a compute done without
// the lease after WaitTimeout (OnBusy: BusyCompute). After InvalidateTags
// returns nil, no caller is served a value carrying one of its tags whose
// compute began before the call (README "Tags and InvalidateTags"): not
// the caller that started the compute, and not one that began after the
// invalidation returned and joined it.

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

// checkNotOld fails the test unless the call was answered with the value
// computed after the invalidation.
func checkNotOld(t testing.TB, who string, f fetched) {
	t.Helper()
	if f.err != nil || f.r.Value != "new" {
		t.Errorf("%s: %q (%v) %v; want \"new\": the value computed before the invalidation was served after it returned", who, f.r.Value, f.r.Outcome, f.err)
	}
}

// A replica that computes without the lease after WaitTimeout (OnBusy:
// BusyCompute, the default) is fenced like the lease holder: when
// InvalidateTags on a third replica returns while that compute runs, its
// value answers neither the caller that started it nor a caller that
// began after the invalidation returned and shared it; it is computed
// again at once (Stats().Recomputed). Tried with the first caller a Fetch
// (joined by a FetchWithFallback, whose fallback does not apply to a load
// it joins) and a GetOrComputeMany (whose key, held by another replica, is
// computed alone after the wait; joined by a Fetch).
func TestInvalidateTagsReachesABusyCompute(t *testing.T) {
	for _, first := range []string{"Fetch", "GetOrComputeMany"} {
		t.Run(first, func(t *testing.T) {
			cs := replicas[string](t, 3, cache.Options{TTL: time.Hour, WaitTimeout: 300 * time.Millisecond})
			a, b, c := cs[0], cs[1], cs[2]
			ctx := bounded(t, 30*time.Second)

			holder := newHeld(t, "holder's") // A holds the lease past B's WaitTimeout
			heldA := async(func() error { _, err := a.GetOrCompute(ctx, inflightKey, holder.fn); return err })
			within(t, holder.calls, 10*time.Second, "A's compute")

			o := newTwoPhase(t)
			started := async(func() fetched {
				if first == "Fetch" {
					r, err := b.Fetch(ctx, inflightKey, o.fn)
					return fetched{r, err}
				}
				m, err := b.GetOrComputeMany(ctx, []string{inflightKey}, o.batch)
				return fetched{cache.Result[string]{Value: m[inflightKey]}, err}
			})
			within(t, o.started, 10*time.Second, "B's compute after WaitTimeout")
			if err := c.InvalidateTags(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			joined := joinLoad(t, func() fetched {
				own := func(context.Context) (string, error) { return "joiner's own", nil }
				var r cache.Result[string]
				var err error
				if first == "Fetch" {
					r, err = b.FetchWithFallback(ctx, inflightKey, own, own)
				} else {
					r, err = b.Fetch(ctx, inflightKey, own)
				}
				return fetched{r, err}
			})
			o.Release()

			checkNotOld(t, "the caller that started the compute", within(t, started, 10*time.Second, "the first caller").v)
			checkNotOld(t, "a caller that began after InvalidateTags returned", within(t, joined, 10*time.Second, "the joiner").v)
			if n := b.Stats().Recomputed; n == 0 {
				t.Errorf("Recomputed %d on the computing replica", n)
			}
			holder.Release()
			if err := within(t, heldA, 10*time.Second, "A's call").v; err != nil {
				t.Fatal(err)
			}
		})
	}
}
