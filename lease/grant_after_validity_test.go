package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// Issue 39, item 6. A grant whose reply arrives after the lease's validity
// (TTL less the drift allowance, counted from when it was sent) may already
// be another holder's: Acquire must not hand it out, and Using must not run
// fn under it. Here every message between the holder and the servers is
// 150 ms late, so a 100 ms lease's grant answers 300 ms after it was sent,
// within RedisTimeout (ServerTimeout) but long past the validity.
func TestAcquireRefusesAGrantThatAnswersAfterItsValidity(t *testing.T) {
	for _, kind := range []string{"single", "quorum"} {
		t.Run(kind, func(t *testing.T) {
			n := 1
			if kind == "quorum" {
				n = 3
			}
			addrs, _, _ := serverAddrs(t, n)
			proxies, proxied := newProxies(t, addrs)
			clients := replicaClients(t, proxied)
			var locker lease.Locker
			if kind == "quorum" {
				locker = newQuorum(t, clients, lease.QuorumOptions{ServerTimeout: 5 * time.Second})
			} else {
				locker = newClient(t, clients[0], lease.Options{RedisTimeout: 5 * time.Second})
			}
			ctx := context.Background()
			name := redistest.Prefix(t)
			// Connections open and scripts loaded before the network slows.
			l, err := locker.Acquire(ctx, name+":warm", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			for _, p := range proxies {
				p.SetLatency(150 * time.Millisecond)
			}
			const ttl = 100 * time.Millisecond

			l, err = locker.Acquire(ctx, name, ttl)
			switch {
			case err == nil:
				t.Errorf("Acquire handed out a lease whose validity had ended %s before", time.Since(l.Until()).Round(time.Millisecond))
			case !errors.Is(err, lease.ErrLeaseLost):
				t.Errorf("Acquire: %v, want ErrLeaseLost", err)
			}

			var ran atomic.Bool
			err = using(ctx, locker, name+":using", ttl, func(ctx context.Context, l *lease.Lease) error {
				ran.Store(true)
				t.Errorf("fn ran %s after the validity ended (its context's error: %v)", time.Since(l.Until()).Round(time.Millisecond), ctx.Err())
				return nil
			})
			if !errors.Is(err, lease.ErrLeaseLost) {
				t.Errorf("Using: %v, want ErrLeaseLost", err)
			}

			if c, ok := locker.(*lease.Client); ok {
				names := []string{name + ":many:0", name + ":many:1"}
				leases, _, errs := c.AcquireMany(ctx, names, ttl)
				for i := range names {
					if leases[i] != nil || !errors.Is(errs[i], lease.ErrLeaseLost) {
						t.Errorf("AcquireMany %s: lease %v, err %v; want no lease, ErrLeaseLost", names[i], leases[i], errs[i])
					}
				}
			}
		})
	}
}

// pausedWhileGranting returns a Client that reaches the server through a
// proxy, and pause: it runs call with the grant's request held at the proxy,
// moves the holder's clock a minute on (a holder paused that long), and
// lets the request through. A 10 s lease is then granted in Redis, live
// there for 10 s, and over by the holder's clock when the reply comes.
func pausedWhileGranting(t *testing.T) (c *lease.Client, direct *redis.Client, pause func(call func())) {
	t.Helper()
	addrs, clients, _ := serverAddrs(t, 1)
	proxies, proxied := newProxies(t, addrs)
	var offset atomic.Int64
	c = newClient(t, replicaClients(t, proxied)[0], lease.Options{})
	lease.SetClientClock(c, func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	warm, err := c.Acquire(context.Background(), redistest.Prefix(t)+":warm", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, clients[0], func(call func()) {
		p := proxies[0]
		holdQuiet(t, p)
		done := make(chan struct{})
		go func() {
			defer close(done)
			call()
		}()
		untilHeld(t, p)
		offset.Add(int64(time.Minute))
		p.SetHold(false)
		recv(t, done, "the call")
	}
}

// holdQuiet makes p hold messages back once none is in flight: the
// reply of an earlier call can reach the client a moment before the proxy
// counts it forwarded, and must not pass for the next call's request.
func holdQuiet(t *testing.T, p *faultproxy.Proxy) {
	t.Helper()
	waitInFlight(t, p, func(n int) bool { return n == 0 }, "the proxy never went quiet")
	p.SetHold(true)
}

// untilHeld waits until p holds a message back.
func untilHeld(t *testing.T, p *faultproxy.Proxy) {
	t.Helper()
	waitInFlight(t, p, func(n int) bool { return n > 0 }, "the request never reached the proxy")
}

func waitInFlight(t *testing.T, p *faultproxy.Proxy, ok func(int) bool, failure string) {
	t.Helper()
	deadline := time.Now().Add(bound) // a bound on a failure, not a synchronisation
	for !ok(p.InFlight()) {
		if time.Now().After(deadline) {
			t.Fatal(failure)
		}
		time.Sleep(time.Millisecond) // the proxy's count is not observable by event: poll
	}
}

// A grant that answers after the holder's validity is given back at once
// (token-checked), not left to block other holders until its TTL ends in
// Redis.
func TestAcquireGivesBackAGrantPastItsValidity(t *testing.T) {
	c, direct, pause := pausedWhileGranting(t)
	ctx := context.Background()
	name := redistest.Prefix(t)
	const ttl = 10 * time.Second
	absent := func(name string) {
		t.Helper()
		key, _ := lease.Keys(name)
		if n, err := direct.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("%s: the late grant is still held in Redis (exists %d, %v)", name, n, err)
		}
	}

	var err error
	pause(func() { _, err = c.Acquire(ctx, name, ttl) })
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Errorf("Acquire: %v, want ErrLeaseLost", err)
	}
	absent(name)

	names := []string{name + ":many:0", name + ":many:1"}
	var leases []*lease.Lease
	var errs []error
	pause(func() { leases, _, errs = c.AcquireMany(ctx, names, ttl) })
	for i := range names {
		if leases[i] != nil || !errors.Is(errs[i], lease.ErrLeaseLost) {
			t.Errorf("AcquireMany %s: lease %v, err %v; want no lease, ErrLeaseLost", names[i], leases[i], errs[i])
		}
		absent(names[i])
	}
}

// KeepAlive on a lease whose validity has already ended returns a context
// that is done before KeepAlive returns: work started under it sees it
// cancelled from the first instruction, not once a timer has fired.
func TestKeepAlivePastTheValidityIsDoneAtOnce(t *testing.T) {
	c := newClient(t, redistest.Client(t), lease.Options{})
	var offset atomic.Int64
	lease.SetClientClock(c, func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	ctx := context.Background()
	l, err := c.Acquire(ctx, redistest.Prefix(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(time.Second)) // the holder was paused past the validity
	kctx, stop := l.KeepAlive(ctx)
	if kctx.Err() == nil || !errors.Is(context.Cause(kctx), lease.ErrLeaseLost) {
		t.Errorf("the work's context is live (cause %v) %s after the validity ended", context.Cause(kctx), time.Now().Add(time.Second).Sub(l.Until()).Round(time.Millisecond))
	}
	if err := stop(); !errors.Is(err, lease.ErrLeaseLost) {
		t.Errorf("stop: %v, want ErrLeaseLost", err)
	}
}
