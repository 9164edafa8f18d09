package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The invalidation subscription's heartbeat runs only while decisions want
// its trust: it stops once the cache is idle, and the first decision after
// that reads the marks on its request path (as on a Cluster) and leaves
// it stopped, a decision after a quiet spell being no sign of traffic;
// the decisions that follow within 2δ start it again, so that those after
// them are vouched for by its answers and read no mark, as before the
// idle spell.
func TestHeartbeatStopsWhenIdleAndRestartsOnDemand(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	rt := &roundTrips{}
	rdb.AddHook(rt)
	const wait = 100 * time.Millisecond
	c := newCache[string](t, rdb, cache.Options{InvalidationWait: wait})
	origin := func(context.Context) (string, error) { return "v", nil }
	if _, err := c.Fetch(ctx, "k", origin); err != nil {
		t.Fatal(err)
	}
	pollFor(t, "the idle cache's heartbeat to stop", 10*time.Second, 10*time.Millisecond, func() bool { return !cache.Heartbeating(c) })
	// The last heartbeat's answer vouches for the marks until δ after it
	// was sent, which on a loaded machine can be after the heartbeat was
	// seen stopped (its answer came late): a span of the library's to let
	// pass, not a wait for an event.
	time.Sleep(wait)

	hit := func() {
		t.Helper()
		r, err := c.Fetch(ctx, "k", origin)
		if err != nil || r.Outcome != cache.Hit {
			t.Fatalf("%+v %v, want a hit", r, err)
		}
	}
	before := rt.marks.Load()
	hit()
	if n := rt.marks.Load() - before; n != 1 {
		t.Errorf("the first hit after an idle spell read the marks %d times, want once (no heartbeat vouches for them)", n)
	}
	// Hits every wait/2, as traffic comes back: the second wants the
	// heartbeat (its read is wait/2 old) within 2δ of the first.
	for i := 0; !cache.Heartbeating(c); i++ {
		if i == 20 {
			t.Fatalf("the heartbeat did not start again in %d hits %s apart", i, wait/2)
		}
		time.Sleep(wait / 2) // the traffic's pace, not a wait for an event
		hit()
	}

	// Hits every wait/2 for 6 waits: without the heartbeat each wait/2
	// would re-read the namespace's mark (in the background from wait/2 on);
	// with it, none does, but for a heartbeat answered late on a loaded
	// machine.
	before = rt.marks.Load()
	for range 12 {
		time.Sleep(wait / 2) // the traffic's pace, not a wait for an event
		hit()
	}
	if n := rt.marks.Load() - before; n > 2 {
		t.Errorf("%d marks reads in 12 hits over %s once the heartbeat ran again, want at most 2", n, 6*wait)
	}
	if !cache.Heartbeating(c) {
		t.Error("the heartbeat stopped while hits wanted it")
	}
}
