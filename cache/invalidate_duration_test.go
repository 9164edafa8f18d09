package cache_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// How long InvalidateTags takes as the fleet grows (issue 38: "InvalidateTags
// still returns within about δ"): R replicas, each its own client, every one
// having read a key tagged "t" three times (so its L1 tracks the key and it
// is subscribed), then 30 InvalidateTags from one replica after another,
// each after the fleet read the key again. Figures only, no bound: the
// library promises the wait of δ, not a latency on a loaded machine.
//
//	STAMPEDE_FLEET_FIGURES=1 go test -count=1 -run TestInvalidateTagsDurationFigures -v ./cache/
func TestInvalidateTagsDurationFigures(t *testing.T) {
	if os.Getenv("STAMPEDE_FLEET_FIGURES") == "" {
		t.Skip("set STAMPEDE_FLEET_FIGURES=1 to measure how long InvalidateTags takes in a fleet")
	}
	for _, r := range []int{1, 8, 64} {
		t.Run(strconv.Itoa(r), func(t *testing.T) {
			servers, _ := redistest.Independent(t, 1)
			ctx := context.Background()
			ns := redistest.Prefix(t)
			var fleet []*cache.Cache[string]
			for range r {
				rdb := redis.NewClient(&redis.Options{Addr: servers[0].Addr(), PoolSize: 2})
				t.Cleanup(func() { _ = rdb.Close() })
				fleet = append(fleet, newCacheAsConfigured[string](t, rdb, cache.Options{Namespace: ns}))
			}
			var took []time.Duration
			for i := range 30 {
				for _, c := range fleet {
					for range 3 {
						if _, err := c.GetOrCompute(ctx, "k", func(ctx context.Context) (string, error) {
							return "v" + strconv.Itoa(i), cache.SetTags(ctx, "t")
						}); err != nil {
							t.Fatal(err)
						}
					}
				}
				start := time.Now()
				if err := fleet[i%r].InvalidateTags(ctx, "t"); err != nil {
					t.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			t.Logf("FIGURE %d replicas: InvalidateTags took %s min, %s median, %s p90, %s max over 30 (δ = 100 ms)",
				r, took[0].Round(100*time.Microsecond), took[15].Round(100*time.Microsecond), took[26].Round(100*time.Microsecond), took[29].Round(100*time.Microsecond))
		})
	}
}
