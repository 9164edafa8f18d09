package cache_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

type Report struct {
	ID    int
	Total int
}

func buildReport(_ context.Context, id int) (Report, error) {
	return Report{ID: id, Total: 1234}, nil
}

func ExampleCache_GetOrCompute() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	reports, err := cache.New[Report](rdb, cache.Options{
		Namespace: "example-reports",
		TTL:       time.Minute,      // fresh for this long
		Stale:     10 * time.Minute, // then served stale while one caller refreshes
	})
	if err != nil {
		log.Fatal(err)
	}
	defer reports.Close()

	ctx := context.Background()
	r, err := reports.GetOrCompute(ctx, "42", func(ctx context.Context) (Report, error) {
		return buildReport(ctx, 42)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.ID, r.Total)
}

func ExampleCache_Fetch() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	// Two replicas of a service: two caches, one namespace.
	opts := cache.Options{Namespace: "greetings"}
	a, _ := cache.New[string](rdb, opts)
	b, _ := cache.New[string](rdb, opts)
	defer a.Close()
	defer b.Close()
	ctx := context.Background()

	hello := func(context.Context) (string, error) { return "hello", nil }
	r1, _ := a.Fetch(ctx, "greeting", hello)
	r2, _ := b.Fetch(ctx, "greeting", hello)
	fmt.Println(r1.Value, r1.Outcome) // hello miss (on an empty Redis)
	fmt.Println(r2.Value, r2.Outcome) // hello hit
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
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	reports, err := cache.New[Report](rdb, cache.Options{Namespace: "reports", TTL: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer reports.Close()
	ctx := context.Background()
	total := 1234
	load := func(ctx context.Context) (Report, error) {
		// Tag the value with what it was built from.
		if err := cache.SetTags(ctx, "customer:7"); err != nil {
			return Report{}, err
		}
		return Report{ID: 42, Total: total}, nil
	}
	r, _ := reports.GetOrCompute(ctx, "42", load)
	fmt.Println(r.Total) // 1234
	// Customer 7 changed: every value tagged with it, on every replica, is
	// gone once InvalidateTags returns (it waits InvalidationWait, 100ms).
	total = 999
	if err := reports.InvalidateTags(ctx, "customer:7"); err != nil {
		log.Fatal(err)
	}
	r, _ = reports.GetOrCompute(ctx, "42", load)
	fmt.Println(r.Total) // 999
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

// Pages of records are compressed from 4 KiB on: about a fifth of the Redis
// memory for such values.
func ExampleS2Codec() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	type Product struct {
		ID   int
		Name string
	}
	pages, err := cache.New[[]Product](rdb, cache.Options{
		Namespace: "catalogue-pages",
		Codec:     cache.S2Codec{MinBytes: 4 << 10},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pages.Close()

	page, err := pages.GetOrCompute(context.Background(), "page-1", func(context.Context) ([]Product, error) {
		products := make([]Product, 100)
		for i := range products {
			products[i] = Product{ID: i, Name: fmt.Sprintf("product %d of the catalogue", i)}
		}
		return products, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(page), page[99].Name)
}
