// Command cacheapi is docs/cache.md's example: GetOrCompute, Fetch and its
// Outcome, and a batch lookup through a cache with an L1 tier. It prints
// what answered each call.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"maps"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

// Report is what the expensive origin builds.
type Report struct {
	ID    int
	Total int
}

// buildReport stands for the expensive origin: a slow query, a remote call.
func buildReport(_ context.Context, id int) (Report, error) {
	return Report{ID: id, Total: 1234}, nil
}

// loadReports stands for a batch query: it finds reports 1 to 8 only.
func loadReports(_ context.Context, ids []string) (map[string]Report, error) {
	fmt.Println("loadReports", ids)
	found := map[string]Report{}
	for _, id := range ids {
		var n int
		if _, err := fmt.Sscan(id, &n); err == nil && n >= 1 && n <= 8 {
			found[id] = Report{ID: n, Total: 100 * n}
		}
	}
	return found, nil
}

func main() {
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	flag.Parse()
	ctx := context.Background()

	// docs:begin getorcompute
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{*redisAddr}})
	defer rdb.Close()
	reports, err := cache.New[Report](rdb, cache.Options{
		Namespace: "reports",
		TTL:       time.Minute,      // fresh for this long
		Stale:     10 * time.Minute, // then served stale while one caller refreshes
	})
	if err != nil {
		log.Fatal(err)
	}
	defer reports.Close()

	r, err := reports.GetOrCompute(ctx, "42", func(ctx context.Context) (Report, error) {
		return buildReport(ctx, 42)
	})
	// docs:end getorcompute
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("report", r.ID, "total", r.Total)

	for _, key := range []string{"7", "8", "9"} { // start from empty keys
		if err := reports.Delete(ctx, key); err != nil {
			log.Fatal(err)
		}
	}
	fetch := func(key string, build func(context.Context) (Report, error)) {
		// docs:begin fetch
		res, err := reports.Fetch(ctx, key, build)
		// res.Outcome: Hit, Miss (this caller computed), Shared (another caller in this process did),
		// Waited (another replica did), Stale, Fallback, Degraded (Redis down, computed locally)
		// res.Age: how old the value is: 0 when this call (or its process, for Shared) just computed it
		// docs:end fetch
		if err != nil {
			log.Fatal(err)
		}
		if res.Outcome == cache.Hit {
			fmt.Println("Fetch", key, res.Outcome) // its Age: since report 42 was computed above
		} else {
			fmt.Println("Fetch", key, res.Outcome, "age", res.Age)
		}
	}
	fetch("42", func(ctx context.Context) (Report, error) { return buildReport(ctx, 42) })
	fetch("7", func(ctx context.Context) (Report, error) { return buildReport(ctx, 7) })

	// docs:begin many
	c, err := cache.New[Report](rdb, cache.Options{Namespace: "reports", L1Size: 10_000, L1TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	vals, err := c.GetOrComputeMany(ctx, []string{"7", "8", "9"}, func(ctx context.Context, missing []string) (map[string]Report, error) {
		return loadReports(ctx, missing) // only the keys this caller won the lease for
	})
	var perKey cache.KeyErrors // errors.As(err, &perKey): the keys without a value, and why
	// docs:end many
	for _, key := range slices.Sorted(maps.Keys(vals)) {
		fmt.Println("batch", key, "total", vals[key].Total)
	}
	if errors.As(err, &perKey) {
		for _, key := range slices.Sorted(maps.Keys(perKey)) {
			fmt.Println("batch", key, "no value, missing from loadReports' answer:", errors.Is(perKey[key], cache.ErrMissingFromBatch))
		}
	} else if err != nil {
		log.Fatal(err)
	}
}
