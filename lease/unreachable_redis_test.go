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

// plainClients returns a go-redis client with its default options for each
// address: no ContextTimeoutEnabled, a 3 s ReadTimeout, a 5 s DialTimeout
// and 3 retries with backoff. A lease step must keep its budget with them.
func plainClients(t *testing.T, addrs []string) []redis.Scripter {
	t.Helper()
	out := make([]redis.Scripter, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		out[i] = c
	}
	return out
}

// within runs step and fails the test unless it returned within budget
// plus slack (a loaded machine's scheduling): the bound the budget
// promises.
func within(t *testing.T, what string, budget time.Duration, step func() error) error {
	t.Helper()
	const slack = 400 * time.Millisecond
	began := time.Now()
	err := step()
	if d := time.Since(began); d > budget+slack {
		t.Errorf("%s took %s, budget %s", what, d.Round(time.Millisecond), budget)
	}
	return err
}

// wantUnavailable fails the test unless err says that Redis could not be
// reached, and where.
func wantUnavailable(t *testing.T, what string, err error, addrs ...string) {
	t.Helper()
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("%s: %v, want ErrUnavailable", what, err)
		return
	}
	for _, a := range addrs {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("%s: %q does not name server %s", what, err, a)
		}
	}
}

// Issue 25, case 5. A Redis that is black-holed (connections stay open,
// nothing answers) with a go-redis client on its defaults: every step of a
// Client (acquire, extend, release) fails within RedisTimeout, says Redis
// was unavailable and names the server, whatever go-redis' own 3 s read
// timeout and retries are.
func TestClientStepsKeepRedisTimeoutAgainstASilentRedis(t *testing.T) {
	addrs, _, _ := serverAddrs(t, 1)
	proxies, proxied := newProxies(t, addrs)
	const budget = 200 * time.Millisecond
	c := newClient(t, plainClients(t, proxied)[0], lease.Options{RedisTimeout: budget})
	ctx := context.Background()
	name := redistest.Prefix(t)
	held, err := c.Acquire(ctx, name+":held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	proxies[0].SetPartition(true)

	err = within(t, "acquire", budget, func() error { _, err := c.Acquire(ctx, name, time.Minute); return err })
	wantUnavailable(t, "acquire", err, proxied[0])
	if !errors.Is(err, lease.ErrRedisTimeout) {
		t.Errorf("acquire: %v, want ErrRedisTimeout", err)
	}
	err = within(t, "extend", budget, func() error { return held.Extend(ctx, time.Minute) })
	wantUnavailable(t, "extend", err, proxied[0])
	err = within(t, "release", budget, func() error { return held.Release(ctx) })
	wantUnavailable(t, "release", err, proxied[0])
	_, _, errs := c.AcquireMany(ctx, []string{name + ":a", name + ":b"}, time.Minute)
	for i, err := range errs {
		wantUnavailable(t, "AcquireMany "+string(rune('a'+i)), err, proxied[0])
	}
}

// Issue 25, case 5, as reported: lease.Acquire against a Redis that was
// killed (a closed port) took 1.70 s to fail, go-redis re-dialling with
// backoff. It fails within the default budget (the lease's validity, at
// most a second) and says Redis was unavailable.
func TestAcquireAgainstAKilledRedisFailsWithinTheBudget(t *testing.T) {
	addrs, _, kill := serverAddrs(t, 1)
	c := newClient(t, plainClients(t, addrs)[0], lease.Options{})
	kill(0)
	err := within(t, "acquire", time.Second, func() error {
		_, err := c.Acquire(context.Background(), redistest.Prefix(t), 10*time.Second)
		return err
	})
	wantUnavailable(t, "acquire", err, addrs[0])
}

// Issue 25, case 5: Campaign with a 2 s context against an unreachable
// Redis returned only "context deadline exceeded". It returns the
// context's error and why the last attempt failed: Redis unavailable, at
// which address.
func TestCampaignAgainstUnreachableRedisSaysSo(t *testing.T) {
	t.Run("single, killed", func(t *testing.T) {
		addrs, _, kill := serverAddrs(t, 1)
		kill(0)
		e := newElection(t, newClient(t, plainClients(t, addrs)[0], lease.Options{}), redistest.Prefix(t), lease.ElectionOptions{})
		campaign(t, e, addrs[0])
	})
	t.Run("quorum, black-holed", func(t *testing.T) {
		addrs, _, _ := serverAddrs(t, 3)
		proxies, proxied := newProxies(t, addrs)
		for _, p := range proxies {
			p.SetPartition(true)
		}
		e := newElection(t, newQuorum(t, plainClients(t, proxied), lease.QuorumOptions{}), redistest.Prefix(t), lease.ElectionOptions{})
		campaign(t, e, proxied...)
	})
}

func campaign(t *testing.T, e *lease.Election, addrs ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	term, err := e.Campaign(ctx)
	if term != nil {
		t.Fatal("a term without Redis")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("campaign: %v, want the context's error", err)
	}
	t.Logf("campaign: %v", err)
	wantUnavailable(t, "campaign", err, addrs...)
}

// A Quorum's round waits for each server on a goroutine of its own, but a
// quorum of one server asked it inline: a client that ignores deadlines
// held the round for go-redis' own timeouts. Every quorum, of one server
// or more, fails within ServerTimeout when no server answers, with an
// error that matches ErrUnavailable and names each server.
func TestQuorumKeepsServerTimeoutWhenNoServerAnswers(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(string(rune('0'+n)), func(t *testing.T) {
			addrs, _, _ := serverAddrs(t, n)
			proxies, proxied := newProxies(t, addrs)
			const budget = 200 * time.Millisecond
			q := newQuorum(t, plainClients(t, proxied), lease.QuorumOptions{ServerTimeout: budget})
			ctx := context.Background()
			held, err := q.Acquire(ctx, redistest.Prefix(t)+":held", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range proxies {
				p.SetPartition(true)
			}
			// An acquisition is a round, and its release when it fails.
			err = within(t, "acquire", 2*budget, func() error { _, err := q.Acquire(ctx, redistest.Prefix(t), time.Minute); return err })
			wantUnavailable(t, "acquire", err, proxied...)
			var qe *lease.QuorumError
			if !errors.As(err, &qe) || len(qe.Errs) != n || !errors.Is(err, lease.ErrRedisTimeout) {
				t.Errorf("acquire: %v, want a QuorumError with a timeout per server", err)
			}
			err = within(t, "extend", budget, func() error { return held.Extend(ctx, time.Minute) })
			wantUnavailable(t, "extend", err, proxied...)
			err = within(t, "release", budget, func() error { return held.Release(ctx) })
			wantUnavailable(t, "release", err, proxied...)
		})
	}
}

// When some servers answer and too few grant, the QuorumError says which
// servers failed and why, each by its address; it is not ErrUnavailable,
// since some servers answered.
func TestQuorumErrorNamesEachFailedServer(t *testing.T) {
	addrs, _, kill := serverAddrs(t, 5)
	proxies, proxied := newProxies(t, addrs)
	q := newQuorum(t, replicaClients(t, proxied), lease.QuorumOptions{ServerTimeout: 200 * time.Millisecond})
	kill(0)
	kill(1)
	proxies[2].SetPartition(true)
	_, err := q.Acquire(context.Background(), redistest.Prefix(t), time.Minute)
	var qe *lease.QuorumError
	if !errors.As(err, &qe) || errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("acquire with 2 of 5 servers: %v, want a QuorumError, not ErrUnavailable", err)
	}
	if len(qe.Errs) != 3 {
		t.Errorf("%d server errors, want 3: %v", len(qe.Errs), err)
	}
	for _, a := range proxied[:3] {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("%q does not name server %s", err, a)
		}
	}
	if !errors.Is(err, lease.ErrRedisTimeout) {
		t.Errorf("%v: the black-holed server's error is not ErrRedisTimeout", err)
	}
}
