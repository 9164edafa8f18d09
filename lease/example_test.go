package lease_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/lease"
)

// Run a job on exactly one replica of a fleet: whoever holds the lease runs
// it; the lease is extended while the job runs and released at the end.
func ExampleClient_Using() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	locks, err := lease.New(rdb, lease.Options{})
	if err != nil {
		log.Fatal(err)
	}
	err = locks.Using(context.Background(), "jobs:nightly-report", 10*time.Second, func(ctx context.Context, l *lease.Lease) error {
		// ctx is cancelled at l.Until() unless an extension moved it on:
		// stop then. Writes must carry l.Fence(), and the storage must
		// reject a fence lower than the highest it has seen.
		fmt.Println("nightly report: done")
		return nil
	})
	if err != nil {
		// errors.Is(err, lease.ErrLeaseBusy): another replica holds it.
		log.Fatal(err)
	}
}

// Take a lease on a majority of independent Redis masters (Redlock), with a
// fencing token that rises across every quorum.
func ExampleQuorum() {
	// One client per independent master (not replicas of one another).
	var masters []redis.Scripter
	for _, addr := range []string{"redis-1:6379", "redis-2:6379", "redis-3:6379"} {
		masters = append(masters, redis.NewClient(&redis.Options{Addr: addr}))
	}

	locks, err := lease.NewQuorum(masters, lease.QuorumOptions{})
	if err != nil {
		log.Fatal(err)
	}
	l, err := locks.Acquire(context.Background(), "jobs:billing", 10*time.Second)
	if err != nil {
		log.Fatal(err) // a *lease.BusyError, or a *lease.QuorumError naming each failed server
	}
	defer l.Release(context.Background())
	fmt.Println("held by a majority, fence", l.Fence())
}

// Run a cleanup every interval on exactly one replica of the fleet.
func ExampleElection_RunEvery() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	locks, err := lease.New(rdb, lease.Options{})
	if err != nil {
		log.Fatal(err)
	}
	e, err := lease.NewElection(locks, "jobs:cleanup", lease.ElectionOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	// Until the process is interrupted: RunEvery then resigns and returns.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err = e.RunEvery(ctx, 5*time.Minute, func(ctx context.Context) error {
		// ctx is cancelled if this replica stops leading.
		fmt.Println("cleanup ran on the leader")
		return nil
	})
	fmt.Println("stopped:", err)
}
