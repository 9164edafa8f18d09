package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
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
