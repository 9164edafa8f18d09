package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// restartedServerTimeout is the quorums' ServerTimeout in these tests: a
// budget that a loaded machine meets, the first command of each client
// dialling through a fault proxy under -race included (at 200 ms, a
// server that answered late was not counted, and A found no majority).
// A's acquire waits it out for the two servers it is cut off from.
const restartedServerTimeout = time.Second

// restartedTTL is the leases' TTL: A's validity must outlast its own
// acquire (restartedServerTimeout), a restart, and B's attempt (one more
// restartedServerTimeout when B is cut off from servers).
const restartedTTL = 5 * time.Second

// restartable is five independent servers that a test can restart empty,
// with replica A reaching them through fault proxies of its own.
type restartable struct {
	addrs    []string
	clients  []*redis.Client
	restart  func(i int)
	aProxied []string
	cutA     func(on bool, idx ...int)
}

func newRestartable(t *testing.T) restartable {
	t.Helper()
	servers, clients := redistest.Independent(t, 5)
	r := restartable{clients: clients}
	for _, s := range servers {
		r.addrs = append(r.addrs, s.Addr())
	}
	r.restart = func(i int) {
		// SIGKILL, then a new process on the same port with nothing in it:
		// a crash without persistence.
		if err := servers[i].Restart(); err != nil {
			t.Fatal(err)
		}
		if n := clients[i].DBSize(context.Background()).Val(); n != 0 {
			t.Fatalf("server %d restarted with %d keys", i, n)
		}
	}
	proxies, proxied := newProxies(t, r.addrs)
	r.aProxied = proxied
	r.cutA = func(on bool, idx ...int) {
		for _, i := range idx {
			proxies[i].SetPartition(on)
		}
	}
	return r
}

// holdOnThree makes A take the lease on name on servers 0, 1 and 2 only,
// the least majority of five: A is cut off from 3 and 4 while it acquires.
func (r restartable) holdOnThree(t *testing.T, name string, ttl time.Duration) *lease.Lease {
	t.Helper()
	a := newQuorum(t, replicaClients(t, r.aProxied), lease.QuorumOptions{ServerTimeout: restartedServerTimeout})
	r.cutA(true, 3, 4)
	la, err := a.Acquire(context.Background(), name, ttl)
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	if got := holders(t, r.clients, name, la.Token()); got != 3 {
		t.Fatalf("A holds the lease on %d servers, want 3", got)
	}
	return la
}

// Issue 25, case 6. A holds the lease on servers 0, 1 and 2; server 0
// crashes and comes back empty (the Redlock "delayed restart" that doc.go
// left to operators). B must not win the lease on 0, 3 and 4 while A's is
// valid: server 0 does not count until a TTL has passed since it came
// back, or until nobody holds the lease anywhere.
func TestQuorumDoesNotCountAServerRestartedEmptyWhileTheLeaseItLostIsValid(t *testing.T) {
	r := newRestartable(t)
	name := redistest.Prefix(t)
	const ttl = restartedTTL
	la := r.holdOnThree(t, name, ttl)
	r.restart(0)

	b := newQuorum(t, replicaClients(t, r.addrs), lease.QuorumOptions{ServerTimeout: restartedServerTimeout})
	lb, err := b.Acquire(context.Background(), name, ttl)
	if err == nil {
		t.Fatalf("B took the lease (fence %d) on %d servers while A's was valid for %s more (fence %d): two holders",
			lb.Fence(), holders(t, r.clients, name, lb.Token()), time.Until(la.Until()).Round(time.Millisecond), la.Fence())
	}
	if !errors.Is(err, lease.ErrLeaseBusy) {
		t.Fatalf("B: %v, want ErrLeaseBusy", err)
	}
	if time.Now().After(la.Until()) {
		t.Fatal("A's validity ended before B's attempt: the test proves nothing on this machine")
	}

	// Once A's lease has expired, B gets it, with a fence above A's.
	b = newQuorum(t, replicaClients(t, r.addrs), lease.QuorumOptions{
		Options:       lease.Options{Retries: 1000, RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond},
		ServerTimeout: restartedServerTimeout,
	})
	lb, err = b.Acquire(context.Background(), name, ttl)
	if err != nil {
		t.Fatalf("B after A's lease expired: %v", err)
	}
	if now := time.Now(); now.Before(la.Until()) {
		t.Fatalf("B acquired %s before A's validity ended", la.Until().Sub(now))
	}
	if lb.Fence() <= la.Fence() {
		t.Fatalf("B's fence %d not above A's %d", lb.Fence(), la.Fence())
	}
}

// The same, with B cut off from A's other servers (1 and 2), so that B
// sees no one holding the lease: server 0's yes still does not count,
// because servers 3 and 4 show that the name was leased (an earlier lease
// took them) and B cannot hear from every server.
func TestQuorumDoesNotCountARestartedServerWhenTheHoldersOtherServersAreCutOff(t *testing.T) {
	r := newRestartable(t)
	name := redistest.Prefix(t)
	const ttl = restartedTTL
	// An earlier lease on all five servers, released: they all know the name.
	first := newQuorum(t, replicaClients(t, r.addrs), lease.QuorumOptions{})
	l0, err := first.Acquire(context.Background(), name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	// The fence's write-back returns once a majority took it; the rest
	// lands after. A server still up less than the quarantine counts only
	// once its write-back recorded that it took part since its start: wait
	// for all five (under load, server 1's came after A's grant, which then
	// did not count it, and A found no majority).
	tookPart(t, r.clients, name)
	if err := l0.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	la := r.holdOnThree(t, name, ttl)
	r.restart(0)

	bProxies, bProxied := newProxies(t, r.addrs)
	bProxies[1].SetPartition(true)
	bProxies[2].SetPartition(true)
	b := newQuorum(t, replicaClients(t, bProxied), lease.QuorumOptions{ServerTimeout: restartedServerTimeout})
	lb, err := b.Acquire(context.Background(), name, ttl)
	if err == nil {
		t.Fatalf("B took the lease (fence %d) while A's was valid for %s more (fence %d): two holders",
			lb.Fence(), time.Until(la.Until()).Round(time.Millisecond), la.Fence())
	}
	if !errors.Is(err, lease.ErrNoQuorum) || !errors.Is(err, lease.ErrServerRestarted) {
		t.Fatalf("B: %v, want ErrNoQuorum naming the restarted server", err)
	}
	t.Log(err)
	if time.Now().After(la.Until()) {
		t.Fatal("A's validity ended before B's attempt: the test proves nothing on this machine")
	}
}

// A brand-new deployment is not held back: servers that just started and
// know nothing of the name count at once, even with one of them down.
func TestQuorumCountsFreshServersOnTheFirstLease(t *testing.T) {
	addrs, _, kill := serverAddrs(t, 5)
	kill(4)
	q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{ServerTimeout: restartedServerTimeout})
	if _, err := q.Acquire(context.Background(), redistest.Prefix(t), time.Minute); err != nil {
		t.Fatalf("first lease on fresh servers, one down: %v", err)
	}
}

// tookPart waits until every server records that it took part in a fenced
// lease on name (its run key), for up to 10 s.
func tookPart(t *testing.T, clients []*redis.Client, name string) {
	t.Helper()
	ctx := context.Background()
	for i, c := range clients {
		for start := time.Now(); c.Exists(ctx, lease.RunKey(name)).Val() != 1; {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("server %d recorded no part in the lease on %q within 10s", i, name)
			}
			time.Sleep(10 * time.Millisecond) // a bounded poll for the write-back
		}
	}
}
