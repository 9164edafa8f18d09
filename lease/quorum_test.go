package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

func newQuorum(t *testing.T, clients []redis.Scripter, opts lease.QuorumOptions) *lease.Quorum {
	t.Helper()
	q, err := lease.NewQuorum(clients, opts)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// replicaClients returns a new client of its own for each server: a replica
// of the fleet.
func replicaClients(t *testing.T, addrs []string) []redis.Scripter {
	t.Helper()
	out := make([]redis.Scripter, len(addrs))
	for i, a := range addrs {
		// ContextTimeoutEnabled: a black-holed server must not hold a
		// round past the quorum's ServerTimeout.
		c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		out[i] = c
	}
	return out
}

func serverAddrs(t *testing.T, n int) ([]string, []*redis.Client, func(i int)) {
	t.Helper()
	servers, clients := redistest.Independent(t, n)
	addrs := make([]string, n)
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	kill := func(i int) {
		if err := servers[i].Stop(); err != nil {
			t.Fatal(err)
		}
	}
	return addrs, clients, kill
}

// holders counts the servers (among those given) whose lease key for name
// holds token.
func holders(t *testing.T, clients []*redis.Client, name, token string) int {
	t.Helper()
	key, _ := lease.Keys(name)
	n := 0
	for _, c := range clients {
		got, err := c.Get(context.Background(), key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET %s: %v", key, err)
		}
		if got == token {
			n++
		}
	}
	return n
}

// acquireAbove takes the lease on name with q and fails the test unless its
// fence is above floor: the fence rose past every earlier one.
func acquireAbove(t *testing.T, q *lease.Quorum, name string, floor int64) *lease.Lease {
	t.Helper()
	l, err := q.Acquire(context.Background(), name, time.Minute)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if l.Fence() <= floor {
		t.Fatalf("fence %d not above %d", l.Fence(), floor)
	}
	return l
}

func TestQuorumAcquireReleaseAndFence(t *testing.T) {
	ctx := context.Background()
	addrs, clients, _ := serverAddrs(t, 5)
	q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{})
	other := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{})
	name := redistest.Prefix(t)
	if q.Majority() != 3 {
		t.Fatalf("majority of 5 = %d", q.Majority())
	}

	l1, err := q.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := holders(t, clients, name, l1.Token()); got != 5 {
		t.Fatalf("lease on %d of 5 servers", got)
	}
	for i, c := range clients {
		if got, err := c.Get(ctx, l1.FenceKey()).Int64(); err != nil || got != l1.Fence() {
			t.Fatalf("server %d: fence key %d %v, handed out %d", i, got, err, l1.Fence())
		}
	}
	var be *lease.BusyError
	if _, err := other.Acquire(ctx, name, time.Minute); !errors.As(err, &be) || be.Remaining <= 0 {
		t.Fatalf("second holder: err=%v, want a BusyError with the remaining time", err)
	}
	if got := holders(t, clients, name, l1.Token()); got != 5 {
		t.Fatalf("the busy attempt touched the holder's lease: %d of 5 left", got)
	}
	if err := l1.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	extended := 0 // Extend returns once a majority took it
	for _, c := range clients {
		if c.PTTL(ctx, l1.Key()).Val() > time.Minute {
			extended++
		}
	}
	if extended < 3 {
		t.Fatalf("extended on %d of 5 servers", extended)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := holders(t, clients, name, l1.Token()); got != 0 {
		t.Fatalf("lease left on %d servers after Release", got)
	}
	if err := l1.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("double release: %v, want ErrLeaseLost", err)
	}
	if err := l1.Extend(ctx, time.Minute); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("extend after release: %v, want ErrLeaseLost", err)
	}
	acquireAbove(t, other, name, l1.Fence())
}

// Several replicas, each with its own clients, and many goroutines each:
// at no moment do two hold the lease, and the fences follow the order in
// which they held it. Redlock promises safety here, not progress: split
// votes can leave every attempt short of a majority, and on a loaded
// machine some attempts miss the server timeout; none of those may leave
// anything held, so a lone acquisition afterwards gets the lease, with a
// fence above all of them.
func TestQuorumMutualExclusionUnderContention(t *testing.T) {
	addrs, _, _ := serverAddrs(t, 5)
	name := redistest.Prefix(t)
	const replicas, goroutines = 4, 50
	const ttl = 3 * time.Second
	var (
		inside, held, busy, failed atomic.Int32
		mu                         sync.Mutex
		fences                     []int64
		wg                         sync.WaitGroup
	)
	start := make(chan struct{})
	for range replicas {
		q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{
			Options: lease.Options{Retries: 10, RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond},
		})
		for range goroutines {
			wg.Go(func() {
				<-start
				err := q.Using(context.Background(), name, ttl, func(ctx context.Context, l *lease.Lease) error {
					if n := inside.Add(1); n != 1 {
						t.Errorf("%d holders at once", n)
					}
					mu.Lock()
					fences = append(fences, l.Fence())
					mu.Unlock()
					inside.Add(-1)
					return nil
				})
				switch {
				case err == nil:
					held.Add(1)
				case errors.Is(err, lease.ErrLeaseBusy):
					busy.Add(1)
				case errors.Is(err, lease.ErrNoQuorum), errors.Is(err, lease.ErrLeaseLost):
					failed.Add(1) // servers too slow for the timeout, or a grant too late: nothing held
				default:
					t.Error(err)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if held.Load()+busy.Load()+failed.Load() != replicas*goroutines {
		t.Fatalf("held=%d busy=%d failed=%d of %d", held.Load(), busy.Load(), failed.Load(), replicas*goroutines)
	}
	t.Logf("held=%d busy=%d failed=%d", held.Load(), busy.Load(), failed.Load())
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("holder %d got fence %d after %d", i, fences[i], fences[i-1])
		}
	}
	var last int64
	if len(fences) > 0 {
		last = fences[len(fences)-1]
	}
	// A grant that reached a server after its attempt gave up expires with
	// its TTL: the lone acquisition retries for that long at most.
	lone := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{
		Options: lease.Options{Retries: 1000, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond},
	})
	acquireAbove(t, lone, name, last)
}

// extensions returns Options whose OnExtend reports every extension's result.
func extensions(opts lease.Options) (lease.Options, <-chan error) {
	ch := make(chan error, 1000)
	opts.OnExtend = func(_ *lease.Lease, err error) {
		select {
		case ch <- err:
		default:
		}
	}
	return opts, ch
}

// waitExtended waits for n successful extensions. A failed one that does
// not find the lease lost (a slow server on a busy machine) is retried by
// KeepAlive and is not a failure; one that finds it lost is.
func waitExtended(t *testing.T, ch <-chan error, n int) {
	t.Helper()
	for ok := 0; ok < n; {
		select {
		case err := <-ch:
			if errors.Is(err, lease.ErrLeaseLost) {
				t.Fatalf("extension found the lease lost: %v", err)
			}
			if err == nil {
				ok++
			}
		case <-time.After(30 * time.Second): // a bound on a failure, not a synchronisation
			t.Fatalf("only %d of %d extensions came", ok, n)
		}
	}
}

func TestQuorumKillTwoOfFiveMidHold(t *testing.T) {
	addrs, clients, kill := serverAddrs(t, 5)
	opts, extended := extensions(lease.Options{ExtendInterval: 30 * time.Millisecond})
	q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{Options: opts, ServerTimeout: time.Second})
	name := redistest.Prefix(t)
	const ttl = 300 * time.Millisecond
	var first int64
	err := q.Using(context.Background(), name, ttl, func(ctx context.Context, l *lease.Lease) error {
		first = l.Fence()
		kill(0)
		kill(3)
		// Extensions go on past several TTLs with 3 of 5 servers.
		waitExtended(t, extended, 3*int(ttl/(30*time.Millisecond)))
		if err := context.Cause(ctx); err != nil {
			t.Errorf("the work's context ended: %v", err)
		}
		if got := holders(t, []*redis.Client{clients[1], clients[2], clients[4]}, name, l.Token()); got != 3 {
			t.Errorf("lease on %d of the 3 live servers", got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Using with 2 of 5 servers dead: %v", err)
	}
	// With 3 of 5 servers, the next acquisition's fence still rises.
	acquireAbove(t, newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{ServerTimeout: time.Second}), name, first)
}

func TestQuorumKillThreeOfFive(t *testing.T) {
	ctx := context.Background()
	addrs, clients, kill := serverAddrs(t, 5)
	name := redistest.Prefix(t)

	t.Run("acquire fails, nothing held", func(t *testing.T) {
		q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{ServerTimeout: time.Second})
		held, err := q.Acquire(ctx, name+":held", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		kill(0)
		kill(1)
		kill(2)
		_, err = q.Acquire(ctx, name, time.Minute)
		var qe *lease.QuorumError
		if !errors.Is(err, lease.ErrNoQuorum) || !errors.As(err, &qe) {
			t.Fatalf("err=%v, want a QuorumError", err)
		}
		if qe.OK != 2 || qe.Needed != 3 || qe.Of != 5 || len(qe.Errs) != 3 || !strings.Contains(err.Error(), "2 of 5 servers, 3 needed") {
			t.Fatalf("unclear error: %+v: %v", qe, err)
		}
		key, _ := lease.Keys(name)
		for _, c := range clients[3:] {
			if n := c.Exists(ctx, key).Val(); n != 0 {
				t.Fatal("a failed acquisition left the lease on a live server")
			}
		}
		// A lease held before the majority died is lost: not extendable.
		if err := held.Extend(ctx, time.Minute); errors.Is(err, lease.ErrLeaseLost) || !errors.Is(err, lease.ErrNoQuorum) {
			t.Fatalf("extend with 2 of 5: %v, want ErrNoQuorum", err)
		}
	})
}

// With a majority dead mid-hold, the holder's work is cancelled once the
// lease's validity has passed without an extension reaching a majority.
func TestQuorumKillThreeOfFiveMidHoldCancelsWork(t *testing.T) {
	addrs, _, kill := serverAddrs(t, 5)
	q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{
		Options: lease.Options{ExtendInterval: 20 * time.Millisecond}, ServerTimeout: 300 * time.Millisecond,
	})
	var cause error
	err := q.Using(context.Background(), redistest.Prefix(t), time.Second, func(ctx context.Context, _ *lease.Lease) error {
		kill(1)
		kill(2)
		kill(4)
		waitCtx(t, ctx, "fn's context")
		cause = context.Cause(ctx)
		return nil
	})
	if !errors.Is(cause, lease.ErrLeaseLost) || !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("cause=%v err=%v, want ErrLeaseLost", cause, err)
	}
}

// Every replica reaches the servers through fault proxies; a partition
// black-holes the traffic to a minority of them.
func TestQuorumPartitionIsolatingAMinority(t *testing.T) {
	ctx := context.Background()
	addrs, clients, _ := serverAddrs(t, 5)
	proxied := make([]string, len(addrs))
	proxies := make([]*faultproxy.Proxy, len(addrs))
	for i, a := range addrs {
		p, err := faultproxy.New(a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies[i], proxied[i] = p, p.Addr()
	}
	opts := lease.QuorumOptions{ServerTimeout: 300 * time.Millisecond}
	a := newQuorum(t, replicaClients(t, proxied), opts)
	opts.Retries, opts.RetryBase, opts.RetryMax = 1000, 5*time.Millisecond, 20*time.Millisecond
	// B takes servers 0 and 1, which never held the name and started a
	// moment ago, while 2 and 3 are cut off: to B they look like servers
	// that restarted and may have lost a lease held on 2 and 3 as well,
	// and they would not count for a TTL (TestQuorumDoesNotCount…). They
	// did not restart: this test is about partitions.
	opts.RestartQuarantine = -1
	b := newQuorum(t, replicaClients(t, proxied), opts)
	name := redistest.Prefix(t)

	proxies[0].SetPartition(true)
	proxies[1].SetPartition(true)
	la, err := a.Acquire(ctx, name, 2*time.Second)
	if err != nil {
		t.Fatalf("acquire with a minority cut off: %v", err)
	}
	if got := holders(t, clients, name, la.Token()); got != 3 {
		t.Fatalf("lease on %d servers, want the 3 reachable", got)
	}
	bOnce := newQuorum(t, replicaClients(t, proxied), lease.QuorumOptions{ServerTimeout: 300 * time.Millisecond})
	if _, err := bOnce.Acquire(ctx, name, time.Minute); !errors.Is(err, lease.ErrLeaseBusy) {
		t.Fatalf("second holder during the partition: %v, want ErrLeaseBusy", err)
	}

	// The partition moves: now A's lease is reachable on one server only.
	proxies[0].SetPartition(false)
	proxies[1].SetPartition(false)
	proxies[2].SetPartition(true)
	proxies[3].SetPartition(true)
	if err := la.Extend(ctx, 2*time.Second); errors.Is(err, lease.ErrLeaseLost) || !errors.Is(err, lease.ErrNoQuorum) {
		t.Fatalf("extend with the lease on 1 reachable server: %v, want ErrNoQuorum (not known lost)", err)
	}
	// B gets the lease once A's copy on server 4 expires: on 0, 1 and 4.
	lb := acquireAbove(t, b, name, la.Fence())
	if err := la.Extend(ctx, time.Minute); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("old holder's extend: %v, want ErrLeaseLost", err)
	}
	proxies[2].SetPartition(false)
	proxies[3].SetPartition(false)
	if err := la.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("old holder's release: %v, want ErrLeaseLost", err)
	}
	if got := holders(t, []*redis.Client{clients[0], clients[1], clients[4]}, name, lb.Token()); got != 3 {
		t.Fatalf("the old holder touched the new lease: %d of 3 left", got)
	}
}
