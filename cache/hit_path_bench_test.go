package cache_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// recommendedClient is the README's recommended go-redis options.
func recommendedClient(b *testing.B) *redis.Client {
	return redistest.ClientOpts(b, &redis.Options{
		ContextTimeoutEnabled: true, DialTimeout: time.Second,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, MaxRetries: 1,
	})
}

// BenchmarkHitPath is the Redis hit path (no L1) as the bench's hits
// scenario drives it, with the cache's default RedisTimeout and a caller
// context with a deadline (a request's): with go-redis' default client
// options and with the README's recommended ones, a raw GET of the same
// bytes beside it. par=1 pays one GET per hit; par=64 is 64 callers of one
// hot key, who share GETs. Guards the figures of BENCHMARKS.md's "Hit path
// (issue 26)": allocations per hit and the time per hit.
func BenchmarkHitPath(b *testing.B) {
	value := bytes.Repeat([]byte("x"), 256)
	for _, client := range []string{"default", "recommended"} {
		var rdb *redis.Client
		if client == "default" {
			rdb = redistest.Client(b)
		} else {
			rdb = recommendedClient(b)
		}
		ns := redistest.Prefix(b)
		c, err := cache.New[[]byte](rdb, cache.Options{Namespace: ns, TTL: time.Hour, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		ctx := context.Background()
		if err := c.Set(ctx, "hot", value); err != nil {
			b.Fatal(err)
		}
		raw, err := rdb.Get(ctx, "{"+ns+":hot}:v").Bytes()
		if err != nil {
			b.Fatal(err)
		}
		if err := rdb.Set(ctx, ns+":raw", raw, time.Hour).Err(); err != nil {
			b.Fatal(err)
		}
		fn := func(context.Context) ([]byte, error) { return value, nil }
		impls := []struct {
			name string
			get  func(ctx context.Context) error
		}{
			{"raw-get", func(ctx context.Context) error { return rdb.Get(ctx, ns+":raw").Err() }},
			{"stampede", func(ctx context.Context) error {
				r, err := c.Fetch(ctx, "hot", fn)
				if err == nil && r.Outcome != cache.Hit {
					b.Errorf("outcome %v, want Hit", r.Outcome)
				}
				return err
			}},
		}
		for _, impl := range impls {
			b.Run("client="+client+"/impl="+impl.name+"/par=1", func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				b.ReportAllocs()
				for b.Loop() {
					if err := impl.get(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("client="+client+"/impl="+impl.name+"/par=64", func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				b.ReportAllocs()
				b.SetParallelism(32) // 32 x GOMAXPROCS(2) goroutines
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := impl.get(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkHitPathString is BenchmarkHitPath's par=64 case for a string
// value, which shares the reply's bytes: no allocation per hit beyond the
// shared GET's.
func BenchmarkHitPathString(b *testing.B) {
	rdb := recommendedClient(b)
	c, err := cache.New[string](rdb, cache.Options{Namespace: redistest.Prefix(b), TTL: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	value := string(bytes.Repeat([]byte("x"), 256))
	if err := c.Set(context.Background(), "hot", value); err != nil {
		b.Fatal(err)
	}
	fn := func(context.Context) (string, error) { return value, nil }
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if v, err := c.GetOrCompute(ctx, "hot", fn); err != nil || v != value {
				b.Errorf("%d bytes, %v", len(v), err)
				return
			}
		}
	})
}
