package cache_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/embedded"
)

type Report struct {
	ID    int
	Total int
}

func buildReport(_ context.Context, id int) (Report, error) {
	return Report{ID: id, Total: 1234}, nil
}

// exampleRedis returns a client for $REDIS_URL, or for a redis-server the
// example starts on a free loopback port.
func exampleRedis() (redis.UniversalClient, func()) {
	env, err := embedded.Open(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(env.Options)
	return rdb, func() { _ = rdb.Close(); _ = env.Close() }
}

func ExampleCache_GetOrCompute() {
	rdb, done := exampleRedis()
	defer done()

	reports, err := cache.New[Report](rdb, cache.Options{
		Namespace: "example-reports",
		TTL:       time.Minute,      // fresh for this long
		Stale:     10 * time.Minute, // then served stale while one caller refreshes
		// Each Redis step gets this long before the call goes on without
		// Redis (default 250ms; generous here, as these examples also run
		// under the race detector).
		RedisTimeout: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer reports.Close()

	ctx := context.Background()
	defer reports.Delete(ctx, "42") //nolint:errcheck // keep a shared REDIS_URL clean

	r, err := reports.GetOrCompute(ctx, "42", func(ctx context.Context) (Report, error) {
		return buildReport(ctx, 42)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.ID, r.Total)
	// Output: 42 1234
}

func ExampleCache_Fetch() {
	rdb, done := exampleRedis()
	defer done()

	// Two replicas of a service: two caches, one namespace.
	opts := cache.Options{Namespace: "example-fetch", RedisTimeout: time.Second}
	a, _ := cache.New[string](rdb, opts)
	b, _ := cache.New[string](rdb, opts)
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	defer a.Delete(ctx, "greeting") //nolint:errcheck // keep a shared REDIS_URL clean

	hello := func(context.Context) (string, error) { return "hello", nil }
	r1, _ := a.Fetch(ctx, "greeting", hello)
	r2, _ := b.Fetch(ctx, "greeting", hello)
	fmt.Println(r1.Value, r1.Outcome)
	fmt.Println(r2.Value, r2.Outcome)
	// Output:
	// hello miss
	// hello hit
}

func ExampleNew_processLocal() {
	// A nil client: in-memory entries and in-process coalescing only.
	c, err := cache.New[int](nil, cache.Options{TTL: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	v, _ := c.GetOrCompute(context.Background(), "answer", func(context.Context) (int, error) { return 42, nil })
	fmt.Println(v)
	// Output: 42
}

func ExampleCache_InvalidateTags() {
	rdb, done := exampleRedis()
	defer done()
	reports, err := cache.New[Report](rdb, cache.Options{Namespace: "example-tags", TTL: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer reports.Close()
	ctx := context.Background()
	_ = reports.Clear(ctx)          // a fresh start for the example
	defer reports.Delete(ctx, "42") //nolint:errcheck // keep a shared REDIS_URL clean
	total := 1234
	load := func(ctx context.Context) (Report, error) {
		// Tag the value with what it was built from.
		if err := cache.SetTags(ctx, "customer:7"); err != nil {
			return Report{}, err
		}
		return Report{ID: 42, Total: total}, nil
	}
	r, _ := reports.GetOrCompute(ctx, "42", load)
	fmt.Println(r.Total)
	// Customer 7 changed: every value tagged with it, on every replica, is
	// gone once InvalidateTags returns (it waits InvalidationWait, 100ms).
	total = 999
	if err := reports.InvalidateTags(ctx, "customer:7"); err != nil {
		log.Fatal(err)
	}
	r, _ = reports.GetOrCompute(ctx, "42", load)
	fmt.Println(r.Total)
	// Output:
	// 1234
	// 999
}

func ExampleCache_Clear() {
	// Process-local here; with Redis, Clear reaches every replica.
	c, err := cache.New[string](nil, cache.Options{TTL: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "greeting", "hello", cache.WithTTL(time.Minute)); err != nil {
		log.Fatal(err)
	}
	if err := c.Clear(ctx); err != nil {
		log.Fatal(err)
	}
	_, found, _ := c.Get(ctx, "greeting")
	fmt.Println(found)
	// Output: false
}
