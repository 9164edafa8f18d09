package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// Result.Age is how long ago the value was computed: the time it spent
// stored, on the replica that computed it and on another, fresh or stale
// (the middleware's Age header adds it to a response's own age).
func TestResultAgeCountsTheTimeStored(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, TTL: time.Hour, Stale: time.Hour}
	a := newCache[string](t, redistest.Client(t), opts)
	b := newCache[string](t, redistest.Client(t), opts)
	clk := cache.NewClock()
	cache.UseClock(a, clk)
	cache.UseClock(b, clk)
	ctx := context.Background()
	fn := func(context.Context) (string, error) { return "v", nil }
	if r, err := a.Fetch(ctx, "k", fn); err != nil || r.Outcome != cache.Miss || r.Age != 0 {
		t.Fatalf("the compute: %+v %v, want a miss of age 0", r, err)
	}
	clk.Advance(90 * time.Second)
	for name, c := range map[string]*cache.Cache[string]{"the replica that computed it": a, "another replica": b} {
		// Created is stored to the millisecond.
		if r, err := c.Fetch(ctx, "k", fn); err != nil || r.Outcome != cache.Hit || r.Age < 90*time.Second || r.Age >= 90*time.Second+time.Millisecond {
			t.Errorf("on %s, 90s later: %+v %v, want a hit of age 90s", name, r, err)
		}
	}
	clk.Advance(time.Hour) // stale: served while one caller refreshes it
	r, err := b.Fetch(ctx, "k", fn)
	if want := time.Hour + 90*time.Second; err != nil || r.Outcome != cache.Stale || r.Age < want || r.Age >= want+time.Millisecond {
		t.Errorf("an hour later: %+v %v, want a stale answer of age %s", r, err, want)
	}
}

// Result.Age is 0 for a value the call's own load computed, however long
// storing it took: a miss, the callers that shared its compute, a
// fallback, a compute while Redis is unreachable. The test clock moves on
// 1 ms at every reading, as time passes on a loaded machine between the
// compute and the answer (a miss reported the fill's 0.5 ms, 25 ms under
// load). A value computed earlier still reports its age.
func TestResultAgeIsZeroForAFreshCompute(t *testing.T) {
	ctx := context.Background()
	ticking := func(c *cache.Cache[string]) *cache.TickClock {
		clk := cache.NewTickClock()
		cache.UseTickClock(c, clk)
		clk.SetStep(time.Millisecond)
		return clk
	}
	t.Run("miss and shared", func(t *testing.T) {
		c := newCache[string](t, redistest.Client(t), cache.Options{Namespace: redistest.Prefix(t), TTL: time.Hour})
		ticking(c)
		h := newHeld(t, "v")
		fetch := func() valErr[cache.Result[string]] {
			r, err := c.Fetch(ctx, "k", h.fn)
			return valErr[cache.Result[string]]{r, err}
		}
		first := async(fetch)
		within(t, h.calls, 10*time.Second, "the compute")
		second := async(fetch)
		leakcheck.WaitBlocked(t, doFrame, 2, 10*time.Second) // both callers in the one load
		h.Release()
		outcomes := map[cache.Outcome]int{}
		for _, ch := range []<-chan timed[valErr[cache.Result[string]]]{first, second} {
			got := within(t, ch, 10*time.Second, "an answer").v
			if got.err != nil || got.v.Age != 0 {
				t.Errorf("%+v %v: want Age 0", got.v, got.err)
			}
			outcomes[got.v.Outcome]++
		}
		if outcomes[cache.Miss] != 1 || outcomes[cache.Shared] != 1 {
			t.Errorf("outcomes %v, want a miss and a shared", outcomes)
		}
		if r, err := c.Fetch(ctx, "k", h.fn); err != nil || r.Outcome != cache.Hit || r.Age <= 0 {
			t.Errorf("the next call: %+v %v, want a hit of some age", r, err)
		}
	})
	t.Run("fallback", func(t *testing.T) {
		ns := redistest.Prefix(t)
		l, err := lease.New(redistest.Client(t), lease.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Acquire(ctx, ns+":k", time.Minute); err != nil { // another replica computing
			t.Fatal(err)
		}
		c := newCache[string](t, redistest.Client(t), cache.Options{Namespace: ns, WaitTimeout: 30 * time.Millisecond})
		ticking(c)
		r, err := c.FetchWithFallback(ctx, "k", newHeld(t, "never").fn, func(context.Context) (string, error) { return "fallback", nil })
		if err != nil || r.Outcome != cache.Fallback || r.Age != 0 {
			t.Errorf("%+v %v: want a fallback of Age 0", r, err)
		}
	})
	t.Run("degraded", func(t *testing.T) {
		p, caches := proxiedWith(t, 1, cache.Options{TTL: time.Hour, DegradedTTL: time.Hour})
		c := caches[0]
		clk := cache.NewTickClock() // still while the breaker opens
		cache.UseTickClock(c, clk)
		p.SetPartition(true)
		waitBreaker(t, c, true)
		clk.SetStep(time.Millisecond)
		fn := func(context.Context) (string, error) { return "computed", nil }
		if r, err := c.Fetch(ctx, "k", fn); err != nil || r.Outcome != cache.Degraded || r.Age != 0 {
			t.Errorf("the compute: %+v %v, want a degraded answer of Age 0", r, err)
		}
		if r, err := c.Fetch(ctx, "k", fn); err != nil || r.Outcome != cache.Degraded || r.Age <= 0 {
			t.Errorf("the kept value: %+v %v, want a degraded answer of some age", r, err)
		}
	})
}
