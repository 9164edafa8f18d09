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
		// Redis (default 100ms; generous here, as these examples also run
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
