package cache_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

type benchValue struct {
	ID    int
	Name  string
	Tags  []string
	Score float64
}

var benchVal = benchValue{ID: 42, Name: "a report with a name of some length", Tags: []string{"a", "b", "c"}, Score: 0.5}

// getter is what the hit benchmarks compare: a raw go-redis GET of the same
// bytes, and the cache's hit path (GET + envelope and value decode).
type getter interface {
	get(ctx context.Context) error
}

type rawGet struct {
	rdb *redis.Client
	key string
}

func (r rawGet) get(ctx context.Context) error { return r.rdb.Get(ctx, r.key).Err() }

type cacheGet[V any] struct {
	c  *cache.Cache[V]
	fn func(context.Context) (V, error)
}

func (g cacheGet[V]) get(ctx context.Context) error {
	_, err := g.c.GetOrCompute(ctx, "hot", g.fn)
	return err
}

// hitImpls stores v in a cache and returns the two getters over the same bytes.
func hitImpls[V any](b *testing.B, v V) []struct {
	name string
	g    getter
} {
	ctx := context.Background()
	rdb := redistest.Client(b)
	ns := redistest.Prefix(b)
	c := newCache[V](b, rdb, cache.Options{Namespace: ns, TTL: time.Hour})
	if err := c.Set(ctx, "hot", v); err != nil {
		b.Fatal(err)
	}
	// The raw GET reads the very bytes the cache stored.
	raw, err := rdb.Get(ctx, "{"+ns+":hot}:v").Bytes()
	if err != nil {
		b.Fatal(err)
	}
	rawKey := ns + ":raw"
	if err := rdb.Set(ctx, rawKey, raw, time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	fn := func(context.Context) (V, error) { return v, nil }
	// The Redis budget's cost, side by side: none at all; a client that
	// honours context deadlines (the step runs inline); go-redis' defaults
	// (the step hops to a goroutine of its own), the "stampede" row.
	unbudgeted := newCache[V](b, rdb, cache.Options{Namespace: ns, TTL: time.Hour, RedisTimeout: -1})
	ctxRdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(b), ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = ctxRdb.Close() })
	inline := newCache[V](b, ctxRdb, cache.Options{Namespace: ns, TTL: time.Hour})
	return []struct {
		name string
		g    getter
	}{
		{"raw-get", rawGet{rdb: rdb, key: rawKey}},
		{"stampede", cacheGet[V]{c: c, fn: fn}},
		{"stampede-no-budget", cacheGet[V]{c: unbudgeted, fn: fn}},
		{"stampede-ctx-deadlines", cacheGet[V]{c: inline, fn: fn}},
	}
}

func BenchmarkHit(b *testing.B) {
	ctx := context.Background()
	for _, value := range []string{"struct", "bytes-1k"} {
		var impls []struct {
			name string
			g    getter
		}
		if value == "struct" {
			impls = hitImpls(b, benchVal)
		} else {
			impls = hitImpls(b, bytes.Repeat([]byte("x"), 1024))
		}
		for _, impl := range impls {
			b.Run("value="+value+"/impl="+impl.name+"/par=1", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := impl.g.get(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("value="+value+"/impl="+impl.name+"/par=8", func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(4) // 4 x GOMAXPROCS(2) goroutines
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := impl.g.get(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// One op is a storm: 64 callers on one missing key; the origin runs once.
func BenchmarkCoalescedMiss(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []string{"redis", "local"} {
		b.Run("mode="+mode+"/callers=64", func(b *testing.B) {
			var rdb redis.UniversalClient
			if mode == "redis" {
				rdb = redistest.Client(b)
			}
			c := newCache[benchValue](b, rdb, cache.Options{TTL: time.Hour})
			fn := func(context.Context) (benchValue, error) { return benchVal, nil }
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				key := "k" + strconv.Itoa(i)
				i++
				var wg sync.WaitGroup
				for range 64 {
					wg.Go(func() {
						if _, err := c.GetOrCompute(ctx, key, fn); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
		})
	}
}

// BenchmarkBatchHits: GetOrComputeMany of 100 keys, all hits, against one
// MGET of the same keys.
func BenchmarkBatchHits(b *testing.B) {
	ctx := context.Background()
	rdb := redistest.Client(b)
	c := newCache[[]byte](b, rdb, cache.Options{TTL: time.Hour})
	keys := make([]string, 100)
	vkeys := make([]string, 100)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		vkeys[i] = "{" + c.Namespace() + ":" + keys[i] + "}:v"
		if err := c.Set(ctx, keys[i], bytes.Repeat([]byte("x"), 256)); err != nil {
			b.Fatal(err)
		}
	}
	fn := func(context.Context, []string) (map[string][]byte, error) { return nil, errors.New("must not run") }
	b.Run("impl=mget", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := rdb.MGet(ctx, vkeys...).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=stampede", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if m, err := c.GetOrComputeMany(ctx, keys, fn); err != nil || len(m) != 100 {
				b.Fatal(len(m), err)
			}
		}
	})
}

// BenchmarkProcessLocalHit: a hit in process-local mode (no Redis), one
// goroutine and 8 in parallel, on one key: the local store's read and the
// freshness switch, nothing decoded.
func BenchmarkProcessLocalHit(b *testing.B) {
	ctx := context.Background()
	c := newCache[benchValue](b, nil, cache.Options{TTL: time.Hour})
	fn := func(context.Context) (benchValue, error) { return benchVal, nil }
	if _, err := c.GetOrCompute(ctx, "hot", fn); err != nil {
		b.Fatal(err)
	}
	b.Run("par=1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.GetOrCompute(ctx, "hot", fn); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("par=8", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.GetOrCompute(ctx, "hot", fn); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
