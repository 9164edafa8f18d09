package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// pair is two replicas' lockers over the same servers: A reaches them
// through fault proxies (cut holds A off from all of them), B directly and
// retrying until the lease is free.
type pair struct {
	a, b lease.Locker
	cut  func()
}

func newPair(t *testing.T, kind string) pair {
	t.Helper()
	n := 1
	if kind == "quorum" {
		n = 5
	}
	addrs, _, _ := serverAddrs(t, n)
	proxies, proxied := newProxies(t, addrs)
	retry := lease.Options{Retries: 1 << 20, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond}
	p := pair{cut: func() {
		for _, px := range proxies {
			px.SetPartition(true)
		}
	}}
	if kind == "quorum" {
		qo := lease.QuorumOptions{ServerTimeout: 100 * time.Millisecond}
		p.a = newQuorum(t, replicaClients(t, proxied), qo)
		qo.Options = retry
		p.b = newQuorum(t, replicaClients(t, addrs), qo)
	} else {
		p.a = newClient(t, replicaClients(t, proxied)[0], lease.Options{})
		p.b = newClient(t, replicaClients(t, addrs)[0], retry)
	}
	return p
}

// using is Using on either kind of locker.
func using(ctx context.Context, l lease.Locker, name string, ttl time.Duration, fn func(context.Context, *lease.Lease) error) error {
	switch l := l.(type) {
	case *lease.Client:
		return l.Using(ctx, name, ttl, fn)
	case *lease.Quorum:
		return l.Using(ctx, name, ttl, fn)
	}
	panic("unknown locker")
}

// Issue 25, case 2. A's Using holds the lease and is cut off from the
// servers; B takes the lease as soon as it has expired there. A's work
// must have ended before B's began: A's context is cancelled at the
// lease's validity deadline, not when an extension attempt gives up, and
// A's Using returns once fn does.
func TestUsingCancelsWorkAtTheValidityDeadline(t *testing.T) {
	for _, kind := range []string{"single", "quorum"} {
		t.Run(kind, func(t *testing.T) {
			p := newPair(t, kind)
			name := redistest.Prefix(t)
			const ttl = time.Second
			var (
				aEnd, fnReturned time.Time
				cause            error
				started          = make(chan *lease.Lease, 1)
				done             = make(chan error, 1)
			)
			go func() {
				err := using(context.Background(), p.a, name, ttl, func(ctx context.Context, l *lease.Lease) error {
					started <- l
					waitCtx(t, ctx, "A's context")
					aEnd = time.Now()
					cause = context.Cause(ctx)
					fnReturned = time.Now()
					return nil
				})
				done <- err
			}()
			la := recv(t, started, "A's work")
			p.cut()
			var bStart time.Time
			err := using(context.Background(), p.b, name, ttl, func(context.Context, *lease.Lease) error {
				bStart = time.Now()
				return nil
			})
			if err != nil {
				t.Fatalf("B: %v", err)
			}
			aErr := recv(t, done, "A's Using")
			aReturned := time.Now()
			t.Logf("A's work ended %s before B's began", bStart.Sub(aEnd).Round(time.Microsecond))
			if aEnd.After(bStart) {
				t.Errorf("A's work ended %s after B's began: two holders (A's validity ended %s before B began)",
					aEnd.Sub(bStart).Round(time.Microsecond), bStart.Sub(la.Until()).Round(time.Microsecond))
			}
			if !errors.Is(cause, lease.ErrLeaseLost) || !errors.Is(aErr, lease.ErrLeaseLost) {
				t.Errorf("A: cause %v, Using %v; want ErrLeaseLost", cause, aErr)
			}
			if d := aReturned.Sub(fnReturned); d > 100*time.Millisecond {
				t.Errorf("A's Using returned %s after fn did", d.Round(time.Millisecond))
			}
		})
	}
}

// Issue 25, case 2, as a new user meets it: Using with default options,
// Redis killed while the work runs. The work's context is cancelled when
// the lease ends in Redis (less than a TTL after the last extension that
// reached it), not an extension attempt later, and Using returns at once
// after fn: there is no lease left to release.
func TestUsingWhenRedisDies(t *testing.T) {
	addrs, _, kill := serverAddrs(t, 1)
	rdb := redis.NewClient(&redis.Options{Addr: addrs[0]})
	t.Cleanup(func() { _ = rdb.Close() })
	var (
		mu       sync.Mutex
		extended time.Time // when the last successful extension returned
		first    = make(chan struct{})
	)
	c := newClient(t, rdb, lease.Options{OnExtend: func(_ *lease.Lease, err error) {
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if extended.IsZero() {
			close(first)
		}
		extended = time.Now()
	}})
	const ttl = time.Second
	var cancelled, fnReturned time.Time
	var cause error
	err := c.Using(context.Background(), redistest.Prefix(t), ttl, func(ctx context.Context, l *lease.Lease) error {
		recv(t, first, "the first extension")
		kill(0)
		waitCtx(t, ctx, "fn's context")
		cancelled = time.Now()
		cause = context.Cause(ctx)
		fnReturned = time.Now()
		return nil
	})
	returned := time.Now()
	if !errors.Is(cause, lease.ErrLeaseLost) || !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("cause %v, Using %v; want ErrLeaseLost", cause, err)
	}
	mu.Lock()
	last := extended
	mu.Unlock()
	if d := cancelled.Sub(last); d >= ttl {
		t.Errorf("the work's context was cancelled %s after the last extension returned: past the lease's end in Redis", d.Round(time.Millisecond))
	}
	if d := returned.Sub(fnReturned); d > 100*time.Millisecond {
		t.Errorf("Using returned %s after fn did", d.Round(time.Millisecond))
	}
}
