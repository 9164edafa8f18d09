package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkHitTags compares the hit path of a value with 0 tags and of one
// with 3 tags in one cache, interleaved in chunks of 256 hits so that the
// shared machine's drift hits both alike: from Redis (L1 off) and from L1,
// with the default InvalidationWait. Each op is one hit of each; the
// metrics are ns per hit of each kind, their ratio, and Redis round trips
// per hit of each (the GET, and the amortised background re-reads of the
// marks: one per tag and per δ/2), counted at the client.
func BenchmarkHitTags(b *testing.B) {
	ctx := context.Background()
	for _, tier := range []string{"redis", "l1"} {
		b.Run("tier="+tier, func(b *testing.B) {
			rdb := redistest.Client(b)
			rt := &roundTrips{}
			rdb.AddHook(rt)
			opts := cache.Options{Namespace: redistest.Prefix(b), TTL: time.Hour}
			if tier == "l1" {
				opts.L1Size, opts.L1TTL = 100, time.Hour
			}
			c := newCache[benchValue](b, rdb, opts)
			fn := func(tags ...string) func(ctx context.Context) (benchValue, error) {
				return func(ctx context.Context) (benchValue, error) {
					if len(tags) > 0 {
						if err := cache.SetTags(ctx, tags...); err != nil {
							return benchValue{}, err
						}
					}
					return benchVal, nil
				}
			}
			keys := []string{"untagged", "tagged"}
			fns := []func(context.Context) (benchValue, error){fn(), fn("tenant:1", "report", "region:eu")}
			for range 2 { // the miss, then a hit that puts it in L1
				for i, k := range keys {
					if _, err := c.GetOrCompute(ctx, k, fns[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
			const chunk = 256
			var spent [2]time.Duration
			var trips [2]int64
			b.ReportAllocs()
			b.ResetTimer()
			n := 0
			for b.Loop() {
				n++
				if n%chunk != 1 {
					continue
				}
				for i, k := range keys {
					r0, t0 := rt.n.Load(), time.Now()
					for range chunk {
						if _, err := c.GetOrCompute(ctx, k, fns[i]); err != nil {
							b.Fatal(err)
						}
					}
					spent[i] += time.Since(t0)
					trips[i] += rt.n.Load() - r0
				}
			}
			b.StopTimer()
			hits := float64((n + chunk - 1) / chunk * chunk)
			b.ReportMetric(float64(spent[0].Nanoseconds())/hits, "ns/hit-0tags")
			b.ReportMetric(float64(spent[1].Nanoseconds())/hits, "ns/hit-3tags")
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "ratio")
			b.ReportMetric(float64(trips[0])/hits, "trips/hit-0tags")
			b.ReportMetric(float64(trips[1])/hits, "trips/hit-3tags")
			if n := c.Stats().Computes; n != 2 {
				b.Fatalf("%d computes", n)
			}
		})
	}
}
