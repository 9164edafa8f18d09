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

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newClient(t *testing.T, rdb redis.Scripter, opts lease.Options) *lease.Client {
	t.Helper()
	c, err := lease.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAcquireReleaseAndFence(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	c := newClient(t, rdb, lease.Options{})
	name := redistest.Prefix(t)

	l1, err := c.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(l1.Token()) != 32 {
		t.Fatalf("token %q is not 128 bits hex", l1.Token())
	}
	key, fenceKey := lease.Keys(name)
	if l1.Key() != key || l1.FenceKey() != fenceKey || !strings.HasPrefix(key, "{"+name+"}") {
		t.Fatalf("keys %q %q", l1.Key(), l1.FenceKey())
	}
	if got := rdb.Get(ctx, key).Val(); got != l1.Token() {
		t.Fatalf("lease key holds %q, want our token", got)
	}
	if _, err := c.Acquire(ctx, name, time.Minute); !errors.Is(err, lease.ErrLeaseBusy) {
		t.Fatalf("second acquire: err=%v, want ErrLeaseBusy", err)
	}
	var be *lease.BusyError
	if _, err := c.Acquire(ctx, name, time.Minute); !errors.As(err, &be) || be.Remaining <= 0 {
		t.Fatalf("busy error %v lacks the holder's remaining time", err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("lease key survived Release")
	}
	l2, err := c.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("fence did not rise: %d then %d", l1.Fence(), l2.Fence())
	}
	if ttl := rdb.PTTL(ctx, fenceKey).Val(); ttl <= time.Hour {
		t.Fatalf("fence key TTL %s: it must outlive leases", ttl)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("double release: err=%v, want ErrLeaseLost", err)
	}
}

func TestOneWinnerAmongReplicas(t *testing.T) {
	ctx := context.Background()
	name := redistest.Prefix(t)
	const replicas, goroutines = 4, 100
	var wins atomic.Int32
	var busy atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range replicas {
		c := newClient(t, redistest.Client(t), lease.Options{})
		for range goroutines {
			wg.Go(func() {
				<-start
				_, err := c.Acquire(ctx, name, time.Minute)
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, lease.ErrLeaseBusy):
					busy.Add(1)
				default:
					t.Error(err)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 || busy.Load() != replicas*goroutines-1 {
		t.Fatalf("wins=%d busy=%d, want 1 and %d", wins.Load(), busy.Load(), replicas*goroutines-1)
	}
}

func TestHolderDiesLeaseExpiresAndAnotherTakesOver(t *testing.T) {
	ctx := context.Background()
	name := redistest.Prefix(t)
	dead := newClient(t, redistest.Client(t), lease.Options{})
	l1, err := dead.Acquire(ctx, name, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// The holder "dies": it never releases. Another replica retries until the
	// lease expires on its own.
	other := newClient(t, redistest.Client(t), lease.Options{Retries: 1000, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond})
	l2, err := other.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("fence %d not above the dead holder's %d", l2.Fence(), l1.Fence())
	}
	// The dead holder comes back: its token no longer matches.
	if err := l1.Extend(ctx, time.Minute); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("stale extend: err=%v, want ErrLeaseLost", err)
	}
	if err := l1.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("stale release: err=%v, want ErrLeaseLost", err)
	}
	rdb := redistest.Client(t)
	if got := rdb.Get(ctx, l2.Key()).Val(); got != l2.Token() {
		t.Fatal("the stale holder touched the new holder's lease")
	}
	if ttl := rdb.PTTL(ctx, l2.Key()).Val(); ttl <= 50*time.Millisecond {
		t.Fatalf("the stale extend changed the new lease's TTL to %s", ttl)
	}
}

func TestRetriesWaitForRelease(t *testing.T) {
	ctx := context.Background()
	name := redistest.Prefix(t)
	holder := newClient(t, redistest.Client(t), lease.Options{})
	l1, err := holder.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newClient(t, redistest.Client(t), lease.Options{Retries: 10000, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, name, time.Minute)
		got <- err
	}()
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, "the retrying acquisition"); err != nil {
		t.Fatalf("retrying acquire: %v", err)
	}
}

func TestRetriesHonourContext(t *testing.T) {
	name := redistest.Prefix(t)
	c := newClient(t, redistest.Client(t), lease.Options{Retries: 1 << 20, RetryBase: time.Millisecond, RetryMax: 2 * time.Millisecond})
	if _, err := c.Acquire(context.Background(), name, time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(ctx, name, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err=%v, want DeadlineExceeded", err)
	}
}

func TestUsingExtendsWorkLongerThanTTL(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	c := newClient(t, rdb, lease.Options{})
	name := redistest.Prefix(t)
	const ttl = 300 * time.Millisecond
	err := c.Using(ctx, name, ttl, func(ctx context.Context, l *lease.Lease) error {
		// Work for three TTLs; the lease must still be ours at the end.
		select {
		case <-time.After(3 * ttl):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if got := rdb.Get(ctx, l.Key()).Val(); got != l.Token() {
			t.Errorf("lease key holds %q after 3 TTLs of work", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := lease.Keys(name)
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("Using did not release")
	}
}

func TestUsingCancelsWorkWhenLeaseLost(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	c := newClient(t, rdb, lease.Options{ExtendInterval: 5 * time.Millisecond})
	name := redistest.Prefix(t)
	started := make(chan *lease.Lease, 1)
	var cause error
	done := make(chan error, 1)
	go func() {
		done <- c.Using(ctx, name, time.Minute, func(ctx context.Context, l *lease.Lease) error {
			started <- l
			waitCtx(t, ctx, "fn's context")
			cause = context.Cause(ctx)
			return nil
		})
	}()
	l := recv(t, started, "fn")
	// Another owner steals the lease (as after an expiry and a takeover).
	if err := rdb.Set(ctx, l.Key(), "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	err := recv(t, done, "Using's return")
	if !errors.Is(cause, lease.ErrLeaseLost) {
		t.Fatalf("fn's ctx cause=%v, want ErrLeaseLost", cause)
	}
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Using err=%v, want ErrLeaseLost", err)
	}
	if got := rdb.Get(ctx, l.Key()).Val(); got != "someone-else" {
		t.Fatalf("Using released the new owner's lease: %q", got)
	}
}

func TestUsingExtensionsExhausted(t *testing.T) {
	c := newClient(t, redistest.Client(t), lease.Options{MaxExtensions: 2, ExtendInterval: 10 * time.Millisecond})
	var cause error
	// A TTL far above the extension interval: a loaded machine's stall
	// between two extensions must not expire the lease before they run out.
	err := c.Using(context.Background(), redistest.Prefix(t), 300*time.Millisecond, func(ctx context.Context, _ *lease.Lease) error {
		waitCtx(t, ctx, "fn's context")
		cause = context.Cause(ctx)
		return ctx.Err()
	})
	if !errors.Is(cause, lease.ErrExtensionsExhausted) || !errors.Is(err, lease.ErrExtensionsExhausted) {
		t.Fatalf("cause=%v err=%v, want ErrExtensionsExhausted", cause, err)
	}
}

func TestUsingBusyDoesNotRun(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, redistest.Client(t), lease.Options{})
	name := redistest.Prefix(t)
	if _, err := c.Acquire(ctx, name, time.Minute); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := c.Using(ctx, name, time.Minute, func(context.Context, *lease.Lease) error { ran = true; return nil })
	if ran || !errors.Is(err, lease.ErrLeaseBusy) {
		t.Fatalf("ran=%v err=%v", ran, err)
	}
}

func TestUsingReturnsFnError(t *testing.T) {
	c := newClient(t, redistest.Client(t), lease.Options{})
	want := errors.New("job failed")
	err := c.Using(context.Background(), redistest.Prefix(t), time.Minute, func(context.Context, *lease.Lease) error { return want })
	if !errors.Is(err, want) || errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("err=%v", err)
	}
}

func TestRedisUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb, lease.Options{})
	_, err := c.Acquire(context.Background(), "k", time.Second)
	if err == nil || errors.Is(err, lease.ErrLeaseBusy) {
		t.Fatalf("err=%v, want a connection error", err)
	}
}

func TestBadInput(t *testing.T) {
	rdb := redistest.Client(t)
	c := newClient(t, rdb, lease.Options{})
	ctx := context.Background()
	cases := []struct {
		name string
		do   func() error
		want error
	}{
		{"empty name", func() error { _, err := c.Acquire(ctx, "", time.Second); return err }, lease.ErrInvalidName},
		{"long name", func() error {
			_, err := c.Acquire(ctx, strings.Repeat("x", lease.MaxNameBytes+1), time.Second)
			return err
		}, lease.ErrInvalidName},
		{"zero ttl", func() error { _, err := c.Acquire(ctx, "k", 0); return err }, lease.ErrInvalidTTL},
		{"negative ttl", func() error { _, err := c.Acquire(ctx, "k", -time.Second); return err }, lease.ErrInvalidTTL},
		{"sub-ms ttl", func() error { _, err := c.Acquire(ctx, "k", time.Microsecond); return err }, lease.ErrInvalidTTL},
		{"ttl within the drift allowance", func() error { _, err := c.Acquire(ctx, "k", 2*time.Millisecond); return err }, lease.ErrInvalidTTL},
		{"nil fn", func() error { return c.Using(ctx, "k", time.Second, nil) }, lease.ErrInvalidOptions},
		{"nil client", func() error { _, err := lease.New(nil, lease.Options{}); return err }, lease.ErrInvalidOptions},
		{"negative retries", func() error { _, err := lease.New(rdb, lease.Options{Retries: -1}); return err }, lease.ErrInvalidOptions},
		{"max below base", func() error {
			_, err := lease.New(rdb, lease.Options{RetryBase: time.Second, RetryMax: time.Millisecond})
			return err
		}, lease.ErrInvalidOptions},
		{"negative extensions", func() error { _, err := lease.New(rdb, lease.Options{MaxExtensions: -1}); return err }, lease.ErrInvalidOptions},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, tc.want) {
				t.Fatalf("err=%v, want %v", err, tc.want)
			}
		})
	}
	l, err := c.Acquire(ctx, redistest.Prefix(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 0); !errors.Is(err, lease.ErrInvalidTTL) {
		t.Fatalf("Extend(0): %v", err)
	}
	if strings.Contains(l.String(), l.Token()) {
		t.Fatal("String leaks the token")
	}
}

func TestAcquireMany(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	c := newClient(t, rdb, lease.Options{})
	p := redistest.Prefix(t)
	held, err := c.Acquire(ctx, p+":b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{p + ":a", p + ":b", "", p + ":c"}
	leases, remaining, errs := c.AcquireMany(ctx, names, time.Minute)
	if leases[0] == nil || leases[3] == nil || leases[1] != nil || remaining[1] <= 0 || !errors.Is(errs[2], lease.ErrInvalidName) {
		t.Fatalf("leases %v remaining %v errs %v", leases, remaining, errs)
	}
	if leases[0].Fence() < 1 || rdb.Get(ctx, leases[0].Key()).Val() != leases[0].Token() {
		t.Fatal("acquired lease not in Redis")
	}
	for _, l := range []*lease.Lease{leases[0], leases[3], held} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, _, errs = c.AcquireMany(ctx, names[:1], 0)
	if !errors.Is(errs[0], lease.ErrInvalidTTL) {
		t.Fatalf("ttl 0: %v", errs[0])
	}
}

// A failover to a replica that missed the latest acquisitions, or a restart
// without persistence, loses the lease and its fence. The next holder's
// fence is still above every fence handed out before (it is drawn from the
// server's clock as well as the counter), so a fence-checked write by the
// old holder is rejected rather than mistaken for the new holder's.
func TestFenceRisesPastALostFence(t *testing.T) {
	rdb := redistest.Client(t)
	c := newClient(t, rdb, lease.Options{})
	ctx := context.Background()
	name := redistest.Prefix(t)
	var prev int64
	for i := range 5 {
		l, err := c.Acquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= prev {
			t.Fatalf("acquisition %d: fence %d not above the lost %d", i, l.Fence(), prev)
		}
		prev = l.Fence()
		if got, err := rdb.Get(ctx, l.FenceKey()).Int64(); err != nil || got != prev {
			t.Fatalf("stored fence %d %v, handed out %d", got, err, prev)
		}
		if err := rdb.Del(ctx, l.Key(), l.FenceKey()).Err(); err != nil { // the data loss
			t.Fatal(err)
		}
	}
}
