package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// refusedBound is what a step of a server that refuses connections may
// cost: its dial fails within a round trip on the loopback, so this is
// the scheduling of a loaded machine, not a budget (each below is 1 s).
const refusedBound = 200 * time.Millisecond

// quickly runs step and fails the test unless it returned within
// refusedBound.
func quickly(t *testing.T, what string, step func() error) error {
	t.Helper()
	began := time.Now()
	err := step()
	if d := time.Since(began); d > refusedBound {
		t.Errorf("%s took %s against refused connections, want at most %s: %v", what, d.Round(time.Millisecond), refusedBound, err)
	}
	return err
}

// wantRefused fails the test unless err is the dial's own error (a
// refused connection, not a timeout), naming each address.
func wantRefused(t *testing.T, what string, err error, addrs ...string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("%s: %v, want the dial's error (connection refused)", what, err)
	}
	if errors.Is(err, lease.ErrRedisTimeout) {
		t.Errorf("%s: %v: a refused connection reported as a timeout", what, err)
	}
	for _, a := range addrs {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("%s: %q does not name server %s", what, err, a)
		}
	}
}

// Issue 41, item 2, for leases: go-redis hides a refused dial from the
// command (it dials again and retries with backoff), so a Client's step
// waited out its whole budget and said "no answer in time". A server that
// refuses connections fails every step of a Client at once, with the
// dial's error, as unavailable, naming the server: a server never there,
// and one killed under a held lease (its pooled connection breaks, and
// go-redis' re-dial is refused).
func TestClientStepsFailAtOnceWhenTheServerRefusesConnections(t *testing.T) {
	ctx := context.Background()
	name := redistest.Prefix(t)
	t.Run("never there", func(t *testing.T) {
		addr := redistest.RefusingAddr(t)
		c := newClient(t, plainClients(t, []string{addr})[0], lease.Options{})
		err := quickly(t, "acquire", func() error { _, err := c.Acquire(ctx, name, 10*time.Second); return err })
		wantUnavailable(t, "acquire", err, addr)
		wantRefused(t, "acquire", err, addr)
		_, _, errs := c.AcquireMany(ctx, []string{name + ":a", name + ":b"}, 10*time.Second)
		for i, err := range errs {
			wantUnavailable(t, "AcquireMany", err, addr)
			wantRefused(t, "AcquireMany "+string(rune('a'+i)), err, addr)
		}
	})
	// A Cluster and a Ring dial through a client per node: each is told.
	t.Run("cluster", func(t *testing.T) {
		addr := redistest.RefusingAddr(t)
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
		t.Cleanup(func() { _ = rdb.Close() })
		c := newClient(t, rdb, lease.Options{})
		err := quickly(t, "acquire", func() error { _, err := c.Acquire(ctx, name, 10*time.Second); return err })
		wantUnavailable(t, "acquire", err, addr)
		wantRefused(t, "acquire", err, addr)
	})
	t.Run("ring", func(t *testing.T) {
		addr := redistest.RefusingAddr(t)
		rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}})
		t.Cleanup(func() { _ = rdb.Close() })
		c := newClient(t, rdb, lease.Options{})
		err := quickly(t, "acquire", func() error { _, err := c.Acquire(ctx, name, 10*time.Second); return err })
		wantUnavailable(t, "acquire", err, addr)
		wantRefused(t, "acquire", err, addr)
	})
	t.Run("killed", func(t *testing.T) {
		addrs, _, kill := serverAddrs(t, 1)
		c := newClient(t, plainClients(t, addrs)[0], lease.Options{})
		held, err := c.Acquire(ctx, name+":held", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		kill(0)
		err = quickly(t, "extend", func() error { return held.Extend(ctx, 10*time.Second) })
		wantUnavailable(t, "extend", err, addrs[0])
		wantRefused(t, "extend", err, addrs[0])
		err = quickly(t, "acquire", func() error { _, err := c.Acquire(ctx, name, 10*time.Second); return err })
		wantUnavailable(t, "acquire", err, addrs[0])
		wantRefused(t, "acquire", err, addrs[0])
		err = quickly(t, "release", func() error { return held.Release(ctx) })
		wantUnavailable(t, "release", err, addrs[0])
		wantRefused(t, "release", err, addrs[0])
	})
}

// The same for a Quorum: a round no longer pays a ServerTimeout (1 s
// here) per master that refuses connections. With a majority refused, an
// acquisition fails at once with ErrNoQuorum, each refused server's error
// the dial's, by its address; with every server refused, it is also
// ErrUnavailable.
func TestQuorumFailsAtOnceWhenAMajorityRefusesConnections(t *testing.T) {
	ctx := context.Background()
	live, _, _ := serverAddrs(t, 1)
	down := []string{redistest.RefusingAddr(t), redistest.RefusingAddr(t)}
	t.Run("majority refused", func(t *testing.T) {
		q := newQuorum(t, plainClients(t, append(live[:1:1], down...)), lease.QuorumOptions{})
		err := quickly(t, "acquire", func() error { _, err := q.Acquire(ctx, redistest.Prefix(t), 10*time.Second); return err })
		var qe *lease.QuorumError
		if !errors.As(err, &qe) || qe.Answered != 1 || len(qe.Errs) != 2 {
			t.Fatalf("acquire: %v, want a QuorumError with 1 server answering and 2 failed", err)
		}
		for _, e := range qe.Errs { // in the order they came
			wantRefused(t, "acquire", e)
		}
		wantRefused(t, "acquire", err, down...)
	})
	t.Run("all refused", func(t *testing.T) {
		all := append(down[:2:2], redistest.RefusingAddr(t))
		q := newQuorum(t, plainClients(t, all), lease.QuorumOptions{})
		err := quickly(t, "acquire", func() error { _, err := q.Acquire(ctx, redistest.Prefix(t), 10*time.Second); return err })
		wantUnavailable(t, "acquire", err, all...)
		wantRefused(t, "acquire", err, all...)
	})
}

// A black-holed server (connections accepted, nothing answers) is not
// told by its dial: it still costs a step its whole budget, and is
// reported as a timeout.
func TestABlackHoledServerStillCostsOneBudget(t *testing.T) {
	addrs, _, _ := serverAddrs(t, 1)
	proxies, proxied := newProxies(t, addrs)
	proxies[0].SetPartition(true)
	const budget = 300 * time.Millisecond
	c := newClient(t, plainClients(t, proxied)[0], lease.Options{RedisTimeout: budget})
	began := time.Now()
	err := within(t, "acquire", budget, func() error { _, err := c.Acquire(context.Background(), redistest.Prefix(t), time.Minute); return err })
	if d := time.Since(began); d < budget {
		t.Errorf("acquire against a black hole ended after %s, before its budget %s: %v", d, budget, err)
	}
	wantUnavailable(t, "acquire", err, proxied[0])
	if !errors.Is(err, lease.ErrRedisTimeout) {
		t.Errorf("acquire: %v, want ErrRedisTimeout", err)
	}
}

// The dial hook is added once per go-redis client, whatever the number of
// Clients built on it; a Scripter it cannot be added to has none.
func TestDialHookAddedOncePerClient(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.RefusingAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	a := newClient(t, rdb, lease.Options{})
	b := newClient(t, rdb, lease.Options{})
	if lease.DialWatch(a) == nil || lease.DialWatch(a) != lease.DialWatch(b) {
		t.Errorf("two Clients on one go-redis client: dial watches %p and %p, want one", lease.DialWatch(a), lease.DialWatch(b))
	}
	other := newClient(t, struct{ redis.Scripter }{rdb}, lease.Options{})
	if lease.DialWatch(other) != nil {
		t.Errorf("a wrapped Scripter has a dial watch")
	}
}
