// Command locks is docs/locks.md's example: a job run under a lease on one
// Redis, a lease on a quorum of independent Redis masters, and a periodic
// job run by the elected leader only. It prints what each step did.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/lease"
)

// lastFence is the highest fence a nightly report ran under: storage that
// must not be overwritten by a stale holder keeps such a value and rejects
// writes under a lower one.
var lastFence int64

// runNightlyReport stands for the job: it records its fence.
func runNightlyReport(_ context.Context, fence int64) error {
	fmt.Println("nightly report: ran, fence above the last one:", fence > lastFence)
	lastFence = fence
	return nil
}

func main() {
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	quorumAddrs := flag.String("quorum", "", "comma-separated addresses of independent Redis masters (3 or 5) for the quorum lease; none: skip it")
	every := flag.Duration("every", time.Second, "the periodic job's interval")
	cleanups := flag.Int("cleanups", 3, "how many runs of the periodic job before the program stops (1-100)")
	flag.Parse()
	if *cleanups < 1 || *cleanups > 100 || *every <= 0 {
		log.Fatal("need 1 <= -cleanups <= 100 and -every > 0")
	}
	ctx := context.Background()

	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
	defer rdb.Close()
	locks, err := nightly(ctx, rdb)
	if err != nil {
		log.Fatal(err)
	}
	if *quorumAddrs != "" {
		var masters []redis.Scripter
		for _, addr := range strings.Split(*quorumAddrs, ",") {
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			masters = append(masters, c)
		}
		billing(ctx, masters)
	}
	if err := cleanupEvery(ctx, locks, *every, *cleanups); err != nil {
		log.Fatal(err)
	}
}

// nightly runs the nightly report under a lease, twice, then tries while
// another holder has the lease.
func nightly(ctx context.Context, rdb *redis.Client) (*lease.Client, error) {
	for range 2 {
		// docs:begin using
		locks, err := lease.New(rdb, lease.Options{})
		if err != nil {
			return nil, err
		}
		err = locks.Using(ctx, "jobs:nightly-report", 10*time.Second, func(ctx context.Context, l *lease.Lease) error {
			// Runs on one replica at a time; extended every third of the TTL. ctx is cancelled at the lease's
			// validity deadline, l.Until(), unless an extension moved it on, or as soon as one finds it lost.
			// l.Fence() rises with every acquisition: pass it to storage that rejects stale writers.
			return runNightlyReport(ctx, l.Fence())
		})
		// errors.Is(err, lease.ErrLeaseBusy): another replica holds it. errors.Is(err, lease.ErrLeaseLost): lost while fn ran.
		// docs:end using
		if err != nil {
			return nil, err
		}
	}
	locks, err := lease.New(rdb, lease.Options{})
	if err != nil {
		return nil, err
	}
	held, err := locks.Acquire(ctx, "jobs:nightly-report", 10*time.Second) // as another replica would
	if err != nil {
		return nil, err
	}
	err = locks.Using(ctx, "jobs:nightly-report", 10*time.Second, func(ctx context.Context, l *lease.Lease) error {
		return runNightlyReport(ctx, l.Fence())
	})
	fmt.Println("nightly report: not run while another holds the lease:", errors.Is(err, lease.ErrLeaseBusy))
	if err := held.Release(ctx); err != nil {
		return nil, err
	}
	return locks, nil
}

// billing takes a lease on a quorum of masters and says whether it got it.
func billing(ctx context.Context, masters []redis.Scripter) {
	// docs:begin quorum
	locks, err := lease.NewQuorum(masters, lease.QuorumOptions{
		DriftFactor: 0.01, // validity = TTL − elapsed − (TTL×0.01 + 2ms); a majority must grant within it
	})
	if err != nil {
		log.Fatal(err)
	}
	l, err := locks.Acquire(ctx, "jobs:billing", 10*time.Second) // *BusyError, or *QuorumError (ErrNoQuorum) naming each failed server
	if err != nil {
		fmt.Println("billing: no lease; no quorum:", errors.Is(err, lease.ErrNoQuorum))
		fmt.Println(err) // one line per failed server
		return
	}
	defer l.Release(ctx) // release and Extend go to every server
	// docs:end quorum
	fmt.Printf("billing: leased on a majority of %d masters\n", len(masters))
}

// cleanupEvery runs the cleanup job on the leader of "jobs:cleanup" every
// interval, n times, while a second candidate (another replica) waits.
func cleanupEvery(ctx context.Context, locks *lease.Client, interval time.Duration, n int) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	other, err := lease.NewElection(locks, "jobs:cleanup", lease.ElectionOptions{TTL: 10 * time.Second})
	if err != nil {
		return err
	}
	otherCtx, stopOther := context.WithCancel(ctx)
	otherRuns, otherDone, otherStarted := 0, make(chan struct{}), false
	runs, last := 0, time.Time{}
	cleanup := func(context.Context) error {
		start := time.Now()
		if !otherStarted { // the other replica's candidacy starts once this one leads
			otherStarted = true
			go func() {
				defer close(otherDone)
				_ = other.RunEvery(otherCtx, interval, func(context.Context) error { otherRuns++; return nil })
			}()
		}
		runs++
		if !last.IsZero() { // RunEvery measures the interval from start to start
			fmt.Printf("cleanup: run %d, %s after the last one started\n", runs, time.Since(last).Round(interval/10))
		} else {
			fmt.Printf("cleanup: run %d\n", runs)
		}
		last = start
		if runs == n {
			stopOther()
			<-otherDone
			stop()
		}
		return nil
	}

	// docs:begin election
	e, err := lease.NewElection(locks, "jobs:cleanup", lease.ElectionOptions{TTL: 10 * time.Second}) // locks: a Client or a Quorum
	if err != nil {
		return err
	}
	err = e.RunEvery(ctx, interval, func(ctx context.Context) error { return cleanup(ctx) })
	// Or by hand: term, err := e.Campaign(ctx); ... term.Context(), term.Fence(), term.Resign(ctx); e.Leading()
	// docs:end election
	stopOther()
	if otherStarted {
		<-otherDone
	}
	fmt.Println("cleanup: the other replica ran it", otherRuns, "times")
	if !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
