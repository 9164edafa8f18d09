package robustness

import (
	"testing"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// A compute that ignores its context past ComputeTimeout is abandoned: its
// callers are released with cache.ErrComputeTimeout and its lease given
// up, so the key's next compute may run while it finishes. Before it may
// have been abandoned, and for a compute that honours its context, two
// computes of the key at once are a violation of one compute.
func TestCheckerAbandonedComputeMayRunBesideTheNext(t *testing.T) {
	sc := testScenario
	sc.Options.ComputeTimeout = 250 * time.Millisecond
	for _, tc := range []struct {
		name        string
		ignores     bool
		nextInvoked int
		want        string
	}{
		{"after its ComputeTimeout", true, 260, ""},
		{"before its ComputeTimeout", true, 200, "one compute"},
		{"a compute that honours its context", false, 260, "one compute"},
	} {
		b := newHB()
		ignore := func(r *wire.Request) { r.Compute.IgnoreContext = tc.ignores }
		first := b.op("r0", wire.OpGetOrCompute, "k0", 0, 255, wire.Response{Err: wire.ErrComputeTimeout}, ignore)
		b.computeFor(first, "c1", "k0", "r0", 5, 300, "ok")
		next := b.op("r1", wire.OpGetOrCompute, "k0", tc.nextInvoked, tc.nextInvoked+30, val("c2"))
		b.computeFor(next, "c2", "k0", "r1", tc.nextInvoked+2, tc.nextInvoked+20, "ok")
		if got := properties(Check(sc, b.h)); got != tc.want {
			t.Errorf("%s: violations %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The bound is counted from the compute, not from its call: a call that
// waited on a lease before it computed was not abandoned at its invoke's
// ComputeTimeout, nor at all when its compute ended within its own.
func TestCheckerAbandonedFromItsCompute(t *testing.T) {
	sc := testScenario
	sc.Options.ComputeTimeout = 250 * time.Millisecond
	b := newHB()
	ignore := func(r *wire.Request) { r.Compute.IgnoreContext = true }
	first := b.op("r0", wire.OpGetOrCompute, "k0", 0, 450, val("c1"), ignore)
	b.computeFor(first, "c1", "k0", "r0", 150, 380, "ok") // within its 250 ms from 150: never abandoned
	next := b.op("r1", wire.OpGetOrCompute, "k0", 255, 300, val("c2"))
	b.computeFor(next, "c2", "k0", "r1", 260, 290, "ok")
	if got := properties(Check(sc, b.h)); got != "one compute" {
		t.Errorf("a compute beside one not past its ComputeTimeout: violations %q, want one compute", got)
	}
}
