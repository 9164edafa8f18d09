package cache_test

import (
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// Issue 27 (small ones): Stats().Invalidated counts an invalidated entry
// once per read, not once per check: one entry invalidated and read once
// counts 1, whether it is a miss (InvalidateTags) or stands in for a
// failing compute (ExpireTags), on Redis with L1 off and on and in
// process-local mode.
func TestInvalidatedCountsEachEntryReadOnce(t *testing.T) {
	for mode, m := range expireTagsModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := bounded(t, time.Minute)
			cs, _ := expireTagsFleet(t, mode, cache.Options{TTL: time.Minute, StaleIfError: time.Hour})
			c := cs[0]
			f := newTagged("old")
			if _, err := c.GetOrCompute(ctx, "k", f.fn); err != nil {
				t.Fatal(err)
			}
			if err := c.InvalidateTags(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			if v, err := c.GetOrCompute(ctx, "k", f.fn); err != nil || v != "old" {
				t.Fatalf("after InvalidateTags: %q %v", v, err)
			}
			if got := c.Stats().Invalidated; got != 1 {
				t.Errorf("after one invalidated read: Invalidated = %d, want 1", got)
			}

			if err := c.ExpireTags(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			f.fail.Store(true)
			if r, err := c.Fetch(ctx, "k", f.fn); err != nil || r.Value != "old" || r.Outcome != cache.Stale || r.Err == nil {
				t.Fatalf("after ExpireTags, failing origin: %+v %v", r, err)
			}
			if got := c.Stats().Invalidated; got != 2 {
				t.Errorf("after a second invalidated read that stood in: Invalidated = %d, want 2", got)
			}
		})
	}
}
