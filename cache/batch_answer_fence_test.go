package cache_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
)

// A batch answers its caller once, when its last key has an answer: the
// invalidation fence is judged then, for every key it hands back, not
// when each key got its answer (docs/invalidation.md, "Tags and
// InvalidateTags"; docs/how-it-works.md: the fence is judged when the
// answer reaches its caller). Replica B's GetOrComputeMany([k1, k2]): k1
// gets its answer tagged "t" (B's own compute, or replica A's fill that B
// waited for) while k2 is still held by replica A; InvalidateTags("t")
// returns; k2 arrives. The batch must not hand back k1's value from
// before the invalidation: k1 is loaded again ("new"). And when the
// batch's ctx ends instead, before k2 arrives, k1 gets ctx's error, not
// its old value.
func TestBatchAnswerIsFencedWhenTheBatchReturns(t *testing.T) {
	t.Run("ctx-ends", func(t *testing.T) {
		cs := replicas[string](t, 2, cache.Options{TTL: time.Hour, WaitTimeout: 20 * time.Second})
		a, b := cs[0], cs[1]
		ctx := bounded(t, 60*time.Second)
		k2 := newHeld(t, "k2 by A")
		heldK2 := async(func() error { _, err := a.GetOrCompute(ctx, "k2", k2.fn); return err })
		within(t, k2.calls, 10*time.Second, "A's compute of k2")
		o := newTwoPhase(t)
		o.Release()
		before := batchWaiters()
		bctx, cancel := context.WithCancel(ctx)
		defer cancel()
		batch := async(func() valErr[map[string]string] {
			m, err := b.GetOrComputeMany(bctx, []string{"k1", "k2"}, o.batch)
			return valErr[map[string]string]{m, err}
		})
		eventually(t, 10*time.Second, func() bool { return batchWaiters().joining > before.joining }, func() string {
			return "B's batch did not get to waiting for k2 alone"
		})
		if err := a.InvalidateTags(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		cancel()
		got := within(t, batch, 20*time.Second, "B's batch").v
		if v, ok := got.v["k1"]; ok {
			t.Errorf("k1 = %q: a value computed before InvalidateTags was handed back by a batch that returned after it", v)
		}
		var ke cache.KeyErrors
		if !errors.As(got.err, &ke) || !errors.Is(ke["k1"], context.Canceled) || !errors.Is(ke["k2"], context.Canceled) {
			t.Errorf("err = %v, want k1 and k2 failing with context.Canceled", got.err)
		}
		k2.Release()
		if err := within(t, heldK2, 10*time.Second, "A's call of k2").v; err != nil {
			t.Fatal(err)
		}
		// B's wait for k2 went on for the process's other callers; A's
		// fill ends it.
		eventually(t, 10*time.Second, func() bool { return batchWaiters().inWait == before.inWait }, func() string {
			return "B's wait for k2 did not end after A's fill"
		})
	})

	for _, k1By := range []string{"computed", "waited"} {
		t.Run(k1By, func(t *testing.T) {
			cs := replicas[string](t, 2, cache.Options{TTL: time.Hour, WaitTimeout: 20 * time.Second})
			a, b := cs[0], cs[1]
			ctx := bounded(t, 60*time.Second)

			// A holds k2's lease (an untagged compute) until released.
			k2 := newHeld(t, "k2 by A")
			heldK2 := async(func() error { _, err := a.GetOrCompute(ctx, "k2", k2.fn); return err })
			within(t, k2.calls, 10*time.Second, "A's compute of k2")

			// k1's first compute answers "old", tagged "t"; later ones "new".
			o := newTwoPhase(t)
			var heldK1 <-chan timed[error]
			if k1By == "waited" {
				heldK1 = async(func() error { _, err := a.GetOrCompute(ctx, "k1", o.fn); return err })
				within(t, o.started, 10*time.Second, "A's compute of k1")
			} else {
				o.Release()
			}
			before := batchWaiters()
			batch := async(func() valErr[map[string]string] {
				m, err := b.GetOrComputeMany(ctx, []string{"k1", "k2"}, o.batch)
				return valErr[map[string]string]{m, err}
			})
			if k1By == "waited" {
				// B waits for both keys; A fills k1 and B's wait for it ends.
				eventually(t, 10*time.Second, func() bool { return batchWaiters().waits == before.waits+2 }, func() string {
					return "B's batch did not wait for k1 and k2"
				})
				o.Release()
				if err := within(t, heldK1, 10*time.Second, "A's call of k1").v; err != nil {
					t.Fatal(err)
				}
				eventually(t, 10*time.Second, func() bool { return batchWaiters().waits == before.waits+1 }, func() string {
					return "B's wait for k1 did not end"
				})
			} else {
				// B's own compute of k1 was filled and answered: the batch
				// waits for its wait of k2 only.
				eventually(t, 10*time.Second, func() bool { return batchWaiters().joining > before.joining }, func() string {
					return "B's batch did not get to waiting for k2 alone"
				})
			}
			if err := a.InvalidateTags(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			k2.Release()
			got := within(t, batch, 20*time.Second, "B's batch").v
			if got.err != nil {
				t.Fatal(got.err)
			}
			if got.v["k1"] != "new" {
				t.Errorf("k1 = %q, want \"new\": a value computed before InvalidateTags was handed back by a batch that returned after it", got.v["k1"])
			}
			if got.v["k2"] != "k2 by A" {
				t.Errorf("k2 = %q, want A's value", got.v["k2"])
			}
			if n := b.Stats().Recomputed; n == 0 {
				t.Errorf("Recomputed %d on B: k1 was not loaded again", n)
			}
			if err := within(t, heldK2, 10*time.Second, "A's call of k2").v; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waiting counts the goroutines of a batch's steps (manyAttempt) in the
// test's process: waits, those that wait for another replica's fill of a
// key and hand its answer to the batch (they end once it has it); joining,
// those in which the batch's own keys have their answers and it waits for
// its waits to end; inWait, the waits themselves (shared with the
// process's other callers: they go on when the batch's caller gave up).
type waiting struct{ waits, joining, inWait int }

func batchWaiters() waiting {
	var w waiting
	for g := range strings.SplitSeq(leakcheck.Stacks(), "\n\n") {
		if !strings.Contains(g, "stampede/cache.(*Cache[...]).manyAttempt") {
			continue
		}
		if strings.Contains(g, "stampede/cache.(*Cache[...]).wait(") {
			w.inWait++
		}
		switch {
		case strings.Contains(g, "sync.(*WaitGroup).Go.func"):
			w.waits++
		case strings.Contains(g, "sync.(*WaitGroup).Wait("):
			w.joining++
		}
	}
	return w
}
