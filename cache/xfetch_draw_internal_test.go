package cache

import (
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/stampede-go/stampede/stale"
)

// The hit path draws XFetch's random number only for an entry some draw
// could pick for an early refresh: any entry that the largest draw
// rand.Float64 can give picks is one it draws for, and with no draw (0)
// State never picks a fresh entry.
func TestXFetchDrawsOnlyWhenADrawCouldPick(t *testing.T) {
	c, err := New[string](nil, Options{Beta: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if c.policy.Beta <= 0 {
		t.Fatalf("Beta %v: XFetch is off", c.policy.Beta)
	}
	now := time.Now()
	largest := math.Nextafter(1, 0) // rand.Float64's largest draw
	picked, far := 0, 0
	for _, took := range []time.Duration{time.Microsecond, 3 * time.Millisecond, 50 * time.Millisecond, 2 * time.Second} {
		edge := time.Duration(float64(took) * c.policy.Beta * -math.Log(1-largest))
		for _, left := range []time.Duration{1, took, edge - time.Microsecond, edge, edge + time.Microsecond, 37 * edge / 36, 2 * edge, time.Hour} {
			if left <= 0 {
				continue
			}
			e := entry[string]{took: took, w: stale.Windows{Created: now.Add(-time.Minute), FreshUntil: now.Add(left), StaleUntil: now.Add(left), ErrorUntil: now.Add(left)}}
			may := c.xfetchMayPick(&e, now)
			if c.policy.State(e.w, now, took, largest) == stale.RefreshEarly {
				picked++
				if !may {
					t.Fatalf("took %v, %v left: the largest draw picks it, but no draw is made", took, left)
				}
			}
			if !may {
				far++
			}
			if st := c.policy.State(e.w, now, took, 0); st != stale.Fresh {
				t.Fatalf("took %v, %v left, no draw: %v, want fresh", took, left, st)
			}
		}
	}
	if picked == 0 || far == 0 {
		t.Fatalf("%d entries picked by the largest draw, %d too far to be: the cases miss a side", picked, far)
	}
}
