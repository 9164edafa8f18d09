package cache_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestXFetchPicksL1Hits pins that an L1 hit rolls XFetch's dice as a Redis
// hit does: with L1 answering a hot key's every read, the key would
// otherwise go without an early refresh until L1TTL ended. A Beta so large
// that every fresh hit is picked refreshes the key from an L1 hit, single
// key and batch; Beta 0 never does.
func TestXFetchPicksL1Hits(t *testing.T) {
	for _, batch := range []bool{false, true} {
		for _, beta := range []float64{1e12, 0} {
			t.Run(fmt.Sprintf("batch=%v/beta=%g", batch, beta), func(t *testing.T) {
				// InvalidationWait long: L1 answers while a marks read vouches
				// for it, and under -race on a loaded machine the default
				// 100 ms could lapse between two reads (a CI run: the second
				// read went to Redis).
				c := newCache[int](t, redistest.Client(t), cache.Options{TTL: time.Hour, L1Size: 100, L1TTL: time.Hour, Beta: beta,
					InvalidationWait: 20 * time.Second})
				ctx := context.Background()
				// L1 fills once it tracks the key: wait for it, so that k's
				// first compute goes into L1 and every later read of k is an
				// L1 hit.
				trackForL1(t, c, "k")
				o := &origin[int]{value: 1, delay: 2 * time.Millisecond}
				read := func() {
					t.Helper()
					if batch {
						if _, err := c.GetOrComputeMany(ctx, []string{"k"}, func(ctx context.Context, keys []string) (map[string]int, error) {
							v, err := o.fn(ctx)
							return map[string]int{"k": v}, err
						}); err != nil {
							t.Fatal(err)
						}
						return
					}
					if _, err := c.Fetch(ctx, "k", o.fn); err != nil {
						t.Fatal(err)
					}
				}
				read() // the miss: computed, filled, into L1
				hits := c.Stats().L1Hits
				read()
				if c.Stats().L1Hits != hits+1 {
					t.Fatalf("the second read was not an L1 hit: %+v", c.Stats())
				}
				if beta > 0 {
					waitFor(t, "the early refresh of an L1 hit", func() bool { return o.calls.Load() == 2 })
					return
				}
				for range 50 {
					read()
				}
				if err := c.Close(); err != nil { // waits for any background refresh
					t.Fatal(err)
				}
				if n := o.calls.Load(); n != 1 {
					t.Fatalf("Beta 0: the origin ran %d times", n)
				}
			})
		}
	}
}
