package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// A holder paused between the grant and the fence write-back, past the
// lease's TTL, while another replica takes the lease: its write-back finds
// the lease no longer its own on a majority, so it ends with no fence at all.
func TestQuorumPauseBetweenRoundsLeavesNoUsableFence(t *testing.T) {
	ctx := context.Background()
	addrs, clients, _ := serverAddrs(t, 5)
	name := redistest.Prefix(t)
	paused := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{ServerTimeout: 300 * time.Millisecond})
	inPause, resume := make(chan struct{}), make(chan struct{})
	lease.SetBetweenRounds(paused, func(context.Context) {
		close(inPause)
		select {
		case <-resume:
		case <-time.After(bound):
			t.Error("the paused holder was never resumed")
		}
	})
	other := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{
		Options: lease.Options{Retries: 10000, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond},
	})

	got := make(chan error, 1)
	go func() {
		l, err := paused.Acquire(ctx, name, time.Second)
		if l != nil {
			err = errors.Join(err, errors.New("the paused holder got a lease"))
		}
		got <- err
	}()
	select {
	case <-inPause:
	case err := <-got:
		t.Fatalf("the holder never reached the write-back: %v", err)
	case <-time.After(bound):
		t.Fatal("the holder never reached the write-back")
	}
	// The paused holder's grants expire; the other replica takes over.
	lb, err := other.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := recv(t, got, "the paused holder's acquisition"); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("paused holder: %v, want ErrLeaseLost", err)
	}
	// The paused holder's write-back may have reached the servers where its
	// grant had not expired yet (fewer than a majority: the new holder has
	// the rest); the new lease is untouched wherever it is.
	key, _ := lease.Keys(name)
	mine := 0
	for i, c := range clients {
		if c.Get(ctx, key).Val() != lb.Token() {
			continue
		}
		mine++
		if f, err := c.Get(ctx, lb.FenceKey()).Int64(); err != nil || f != lb.Fence() {
			t.Fatalf("server %d: fence key %d %v: the paused write-back moved it past %d", i, f, err, lb.Fence())
		}
	}
	if mine < 3 {
		t.Fatalf("new holder's lease on %d of 5 servers after the paused one resumed", mine)
	}
}

// A pause between the rounds that outlasts the validity time but not the
// TTL on the servers: the write-back reaches the servers (each within its
// step budget: on a loaded machine one may miss it), and the holder
// still refuses the lease (it might be past its TTL by another clock), and
// releases it. The fence it wrote is harmless: the next one is above it.
func TestQuorumPausePastValidityIsRefused(t *testing.T) {
	ctx := context.Background()
	addrs, clients, _ := serverAddrs(t, 5)
	name := redistest.Prefix(t)
	q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{})
	var offset atomic.Int64
	lease.SetQuorumClock(q, func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	lease.SetBetweenRounds(q, func(context.Context) { offset.Store(int64(time.Minute)) })
	l, err := q.Acquire(ctx, name, time.Minute)
	if l != nil || !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("lease=%v err=%v, want none and ErrLeaseLost", l, err)
	}
	key, fenceKey := lease.Keys(name)
	var written int64
	for _, c := range clients {
		if c.Exists(ctx, key).Val() != 0 {
			t.Fatal("the refused lease was not released")
		}
		f, err := c.Get(ctx, fenceKey).Int64()
		if errors.Is(err, redis.Nil) {
			continue // this server's write-back ran past its step budget (a loaded machine): no fence here
		}
		if err != nil {
			t.Fatal(err)
		}
		written = max(written, f)
	}
	if written == 0 {
		t.Fatal("the refused holder's write-back wrote no fence anywhere")
	}
	// The next fence is above the one the refused holder wrote.
	acquireAbove(t, newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{}), name, written)
}

// A holder paused after it acquired, past its TTL: the next holder's fence
// is above its own, and its extension and release touch nothing.
func TestQuorumPauseAfterAcquirePastTTL(t *testing.T) {
	ctx := context.Background()
	addrs, clients, _ := serverAddrs(t, 5)
	name := redistest.Prefix(t)
	q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{ServerTimeout: 300 * time.Millisecond})
	la, err := q.Acquire(ctx, name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// la's holder is paused: it does nothing while another replica retries
	// until the lease has expired on a majority.
	other := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{
		Options: lease.Options{Retries: 10000, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond},
	})
	lb := acquireAbove(t, other, name, la.Fence())
	if err := la.Extend(ctx, time.Minute); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("paused holder's extend: %v", err)
	}
	if err := la.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("paused holder's release: %v", err)
	}
	if n := holders(t, clients, name, lb.Token()); n < 3 {
		t.Fatalf("new lease on %d of 5 servers, want a majority", n)
	}
}

// Clock drift: the holder measured 6s for the grant of a 10s lease. With a
// drift factor of 0.5 (an allowance of 5.002s) nothing is left of the
// validity and the lease is refused and released; with 0.3 (3.002s) and
// 0.01 (102ms) it holds.
func TestQuorumDriftFactor(t *testing.T) {
	ctx := context.Background()
	addrs, clients, _ := serverAddrs(t, 3)
	for _, tc := range []struct {
		drift float64
		held  bool
	}{{0.5, false}, {0.3, true}, {0.01, true}} {
		name := redistest.Prefix(t)
		q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{DriftFactor: tc.drift})
		var offset atomic.Int64
		lease.SetQuorumClock(q, func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
		lease.SetBetweenRounds(q, func(context.Context) { offset.Store(int64(6 * time.Second)) })
		l, err := q.Acquire(ctx, name, 10*time.Second)
		if held := err == nil; held != tc.held {
			t.Fatalf("drift factor %g: held=%v (%v), want %v", tc.drift, held, err, tc.held)
		}
		key, _ := lease.Keys(name)
		if !tc.held {
			if !errors.Is(err, lease.ErrLeaseLost) {
				t.Fatalf("drift factor %g: %v, want ErrLeaseLost", tc.drift, err)
			}
			for _, c := range clients {
				if c.Exists(ctx, key).Val() != 0 {
					t.Fatalf("drift factor %g: refused lease left on a server", tc.drift)
				}
			}
			continue
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestQuorumBadInput(t *testing.T) {
	ctx := context.Background()
	addrs, _, _ := serverAddrs(t, 3)
	clients := replicaClients(t, addrs)
	q := newQuorum(t, clients, lease.QuorumOptions{})
	cases := []struct {
		name string
		do   func() error
		want error
	}{
		{"no servers", func() error { _, err := lease.NewQuorum(nil, lease.QuorumOptions{}); return err }, lease.ErrInvalidOptions},
		{"nil server", func() error {
			_, err := lease.NewQuorum(append(clients[:2:2], nil), lease.QuorumOptions{})
			return err
		}, lease.ErrInvalidOptions},
		{"negative drift", func() error { _, err := lease.NewQuorum(clients, lease.QuorumOptions{DriftFactor: -0.1}); return err }, lease.ErrInvalidOptions},
		{"drift of 1", func() error { _, err := lease.NewQuorum(clients, lease.QuorumOptions{DriftFactor: 1}); return err }, lease.ErrInvalidOptions},
		{"negative server timeout", func() error {
			_, err := lease.NewQuorum(clients, lease.QuorumOptions{ServerTimeout: -time.Second})
			return err
		}, lease.ErrInvalidOptions},
		{"bad embedded options", func() error {
			_, err := lease.NewQuorum(clients, lease.QuorumOptions{Options: lease.Options{Retries: -1}})
			return err
		}, lease.ErrInvalidOptions},
		{"empty name", func() error { _, err := q.Acquire(ctx, "", time.Second); return err }, lease.ErrInvalidName},
		{"zero ttl", func() error { _, err := q.Acquire(ctx, "k", 0); return err }, lease.ErrInvalidTTL},
		{"ttl within the drift allowance", func() error { _, err := q.Acquire(ctx, "k", 2*time.Millisecond); return err }, lease.ErrInvalidTTL},
		{"nil fn", func() error { return q.Using(ctx, "k", time.Second, nil) }, lease.ErrInvalidOptions},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, tc.want) {
				t.Fatalf("err=%v, want %v", err, tc.want)
			}
		})
	}
}
