package lease_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// newProxies puts a fault proxy of its own in front of each address: one
// replica's network to the servers.
func newProxies(t *testing.T, addrs []string) ([]*faultproxy.Proxy, []string) {
	t.Helper()
	proxies := make([]*faultproxy.Proxy, len(addrs))
	proxied := make([]string, len(addrs))
	for i, a := range addrs {
		p, err := faultproxy.New(a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies[i], proxied[i] = p, p.Addr()
	}
	return proxies, proxied
}

// scriptCalls returns how many script calls (EVAL and EVALSHA) the server
// has run: how a test knows that a delayed message has arrived.
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		for _, cmd := range []string{"cmdstat_eval:", "cmdstat_evalsha:"} {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd)
			if !ok {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			v, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				t.Fatalf("commandstats %q: %v", line, err)
			}
			n += v
		}
	}
	return n
}

// waitScriptCalls waits until server c has run at least n script calls.
func waitScriptCalls(t *testing.T, c *redis.Client, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // a bound on a failure, not a synchronisation
	for scriptCalls(t, c) < n {
		if time.Now().After(deadline) {
			t.Fatalf("server ran %d script calls, want %d: the delayed message never arrived", scriptCalls(t, c), n)
		}
		time.Sleep(time.Millisecond) // polling the server's own count
	}
}

// busyOn makes a holder the test plays hold name on the servers given:
// attempts find the lease busy there.
func busyOn(t *testing.T, clients []*redis.Client, name string, idx ...int) {
	t.Helper()
	key, _ := lease.Keys(name)
	for _, i := range idx {
		if err := clients[i].Set(context.Background(), key, "holder-h", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// warmUp runs an acquisition and a release through q on every server, so
// that the scripts are loaded there: a delayed EVALSHA then runs rather
// than failing with NOSCRIPT.
func warmUp(t *testing.T, q *lease.Quorum, name string) {
	t.Helper()
	l, err := q.Acquire(context.Background(), name+":warm-up", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Acquire(context.Background(), name+":warm-up-busy", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Acquire(context.Background(), name+":warm-up-busy", time.Minute); !errors.Is(err, lease.ErrLeaseBusy) {
		t.Fatalf("warm-up: %v, want busy", err)
	}
}

// Issue 25, case 1. A's first attempt finds the lease busy on servers 0,
// 1 and 2 and gives up; a release it sends to server 0 is held by the
// network past its timeout. Holder H lets go, servers 3 and 4 are cut off
// from A, and A's second attempt wins servers 0, 1 and 2. Then the held
// release arrives at server 0: it must not delete A's new grant, or B wins
// 0, 3 and 4 while A still holds the lease.
func TestQuorumDelayedReleaseOfAFailedAttempt(t *testing.T) {
	ctx := context.Background()
	addrs, clients, _ := serverAddrs(t, 5)
	proxies, proxied := newProxies(t, addrs)
	name := redistest.Prefix(t)
	key, _ := lease.Keys(name)
	const serverTimeout = 100 * time.Millisecond

	var (
		base  int64  // server 0's script calls when attempt 1's grant was over
		first string // attempt 1's token, as server 3 holds it
		letGo = make(chan struct{})
		armed atomic.Bool // after the warm-up
	)
	a := newQuorum(t, replicaClients(t, proxied), lease.QuorumOptions{
		ServerTimeout: serverTimeout,
		Options: lease.Options{Retries: 1, RetryBase: time.Millisecond, RetryMax: time.Millisecond,
			Observer: lease.ObserverFunc(func(_ context.Context, e lease.Event) {
				if e.Kind != lease.EventBusy || !armed.Load() {
					return
				}
				// Attempt 1 is over. H lets go; A is cut off from servers
				// 3 and 4; new messages to server 0 go through.
				close(letGo)
				proxies[0].SetLatency(0)
				proxies[3].SetPartition(true)
				proxies[4].SetPartition(true)
				for _, c := range clients[:3] {
					if err := c.Del(context.Background(), key).Err(); err != nil {
						t.Error(err)
					}
				}
			})},
	})
	warmUp(t, a, name)
	armed.Store(true)
	busyOn(t, clients, name, 0, 1, 2)
	lease.SetAfterFailedGrant(a, func(context.Context) {
		select {
		case <-letGo:
			t.Error("a second attempt failed")
			return
		default:
		}
		// Attempt 1 won servers 3 and 4 only; whatever it sends to
		// server 0 now is held by the network.
		base = scriptCalls(t, clients[0])
		first = clients[3].Get(context.Background(), key).Val()
		proxies[0].SetLatency(time.Second)
	})
	la, err := a.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatalf("A's second attempt: %v", err)
	}
	if la.Token() == first {
		t.Errorf("attempt 2 reused attempt 1's token")
	}
	// Server 0 ran attempt 2's grant and write-back; a held message of
	// attempt 1, if one was sent, is still on its way: wait for it to run.
	if got := scriptCalls(t, clients[0]); got != base+2 {
		t.Fatalf("server 0 ran %d script calls since attempt 1's grant, want 2: the held message came too early (a loaded machine?)", got-base)
	}
	if proxies[0].InFlight() > 0 {
		waitScriptCalls(t, clients[0], base+3)
	}

	b := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{ServerTimeout: serverTimeout})
	lb, err := b.Acquire(ctx, name, time.Minute)
	if err == nil {
		t.Fatalf("B acquired (fence %d) while A holds the lease (fence %d) for another %s: two holders", lb.Fence(), la.Fence(), time.Until(la.Until()).Round(time.Millisecond))
	}
	if !errors.Is(err, lease.ErrLeaseBusy) {
		t.Fatalf("B: %v, want ErrLeaseBusy", err)
	}
	if n := holders(t, clients[:3], name, la.Token()); n != 3 {
		t.Fatalf("A's lease on %d of its 3 servers after the held message arrived", n)
	}
}

// A failed attempt's grant that the network held past the attempt's end:
// server 4 receives it after the attempt released. It must not leave a
// grant that nobody holds (it would keep the server from any holder for a
// whole TTL).
func TestQuorumDelayedGrantOfAFailedAttempt(t *testing.T) {
	ctx := context.Background()
	addrs, clients, _ := serverAddrs(t, 5)
	proxies, proxied := newProxies(t, addrs)
	name := redistest.Prefix(t)
	a := newQuorum(t, replicaClients(t, proxied), lease.QuorumOptions{ServerTimeout: 100 * time.Millisecond})
	warmUp(t, a, name)
	busyOn(t, clients, name, 1, 2, 3)
	var base int64
	proxies[4].SetLatency(500 * time.Millisecond)
	lease.SetAfterFailedGrant(a, func(context.Context) {
		// Server 4 did not answer in time: its grant is still on its way.
		// The release goes through at once.
		base = scriptCalls(t, clients[4])
		proxies[4].SetLatency(0)
	})
	if _, err := a.Acquire(ctx, name, time.Minute); !errors.Is(err, lease.ErrLeaseBusy) {
		t.Fatalf("A: %v, want ErrLeaseBusy", err)
	}
	waitScriptCalls(t, clients[4], base+2) // the release, then the held grant
	key, _ := lease.Keys(name)
	if v, err := clients[4].Get(ctx, key).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("server 4 holds %q (%v) for nobody after the held grant arrived", v, err)
	}
}
