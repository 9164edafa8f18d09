// Command invalidation is docs/invalidation.md's example: a compute tags
// its value, InvalidateTags makes every replica compute it again, and Set
// takes per-call options. It prints what answered each call.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

// Report is what the expensive origin builds.
type Report struct {
	ID      int
	Compute int // which compute of this process built it
}

var computes int

// buildReport stands for the expensive origin: a slow query, a remote call.
func buildReport(_ context.Context, id int) (Report, error) {
	computes++
	return Report{ID: id, Compute: computes}, nil
}

func main() {
	redisAddr := flag.String("redis", "localhost:6379", "Redis address")
	flag.Parse()
	ctx := context.Background()

	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
	defer rdb.Close()
	reports, err := cache.New[Report](rdb, cache.Options{Namespace: "reports", TTL: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer reports.Close()
	for _, key := range []string{"42", "43"} { // start from empty keys
		if err := reports.Delete(ctx, key); err != nil {
			log.Fatal(err)
		}
	}

	get := func() {
		// docs:begin tags
		r, err := reports.GetOrCompute(ctx, "42", func(ctx context.Context) (Report, error) {
			if err := cache.SetTags(ctx, "customer:7", "region:eu"); err != nil {
				return Report{}, err
			}
			return buildReport(ctx, 42)
		})
		// docs:end tags
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("report 42: built by compute %d\n", r.Compute)
	}
	get() // computes
	get() // from the cache
	invalidate(ctx, reports)
	get() // computes again: the value carried customer:7

	report := Report{ID: 43}
	// docs:begin set
	err = reports.Set(ctx, "43", report, cache.WithTTL(30*time.Second), cache.WithStale(time.Minute), cache.WithTags("customer:7"))
	// docs:end set
	if err != nil {
		log.Fatal(err)
	}
	show := func() {
		_, found, err := reports.Get(ctx, "43")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("report 43 found:", found)
	}
	show() // a Set after an invalidation is not invalidated by it
	invalidate(ctx, reports)
	show()
	get()
}

// invalidate invalidates every value tagged customer:7, on every replica.
func invalidate(ctx context.Context, reports *cache.Cache[Report]) {
	// docs:begin invalidate
	err := reports.InvalidateTags(ctx, "customer:7") // ~100 ms: see "What it costs"
	// docs:end invalidate
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("invalidated customer:7")
}
