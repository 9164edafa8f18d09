package lease_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/embedded"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/lease"
)

// exampleRedis returns a client for $REDIS_URL, or for a redis-server the
// example starts on a free loopback port.
func exampleRedis() (*redis.Client, func()) {
	env, err := embedded.Open(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(env.Options)
	return rdb, func() { _ = rdb.Close(); _ = env.Close() }
}

// exampleMasters returns a client for each of n independent Redis masters
// the example starts: redis-servers, or in-process servers without one.
func exampleMasters(n int) ([]redis.Scripter, func()) {
	var addrs []string
	var closers []func()
	if servers, err := redisserver.StartIndependent(n, redisserver.Options{}); err == nil {
		for _, s := range servers {
			addrs = append(addrs, s.Addr())
			closers = append(closers, func() { _ = s.Close() })
		}
	} else {
		for range n {
			m, err := miniredis.Run()
			if err != nil {
				log.Fatal(err)
			}
			addrs = append(addrs, m.Addr())
			closers = append(closers, m.Close)
		}
	}
	var clients []redis.Scripter
	for _, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		clients = append(clients, rdb)
		closers = append(closers, func() { _ = rdb.Close() })
	}
	return clients, func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
}

// Run a job on exactly one replica of a fleet: whoever holds the lease runs
// it; the lease is extended while the job runs and released at the end.
func ExampleClient_Using() {
	rdb, done := exampleRedis()
	defer done()

	locks, err := lease.New(rdb, lease.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = locks.Using(context.Background(), "jobs:nightly-report", 10*time.Second, func(ctx context.Context, l *lease.Lease) error {
		// ctx is cancelled at l.Until() unless an extension moved it on:
		// stop then. Writes must carry l.Fence(), and the storage must
		// reject a fence lower than the highest it has seen.
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
	clients, done := exampleMasters(3) // one client per independent master
	defer done()

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
	rdb, done := exampleRedis()
	defer done()

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
