package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// A holder paused between the grant and the fence write-back while its
// clock stood still (a suspended VM whose clock is not stepped on): its
// validity check cannot tell, so only the write-back's check that the lease
// is still this holder's on each server stops it. B took the lease in the
// pause; A's write-back must find it B's on a majority and give A nothing.
func TestQuorumWriteBackNeedsTheHoldersToken(t *testing.T) {
	ctx := context.Background()
	addrs, clients, _ := serverAddrs(t, 5)
	name := redistest.Prefix(t)
	a := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{ServerTimeout: 300 * time.Millisecond})
	var stood atomic.Int64 // how long A's clock stood still
	lease.SetQuorumClock(a, func() time.Time { return time.Now().Add(-time.Duration(stood.Load())) })
	inPause, resume := make(chan struct{}), make(chan struct{})
	lease.SetBetweenRounds(a, func(context.Context) {
		began := time.Now()
		close(inPause)
		select {
		case <-resume:
		case <-time.After(bound):
			t.Error("A was never resumed")
		}
		stood.Store(int64(time.Since(began)))
	})
	b := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{
		Options: lease.Options{Retries: 1 << 20, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond},
	})
	got := make(chan error, 1)
	go func() {
		l, err := a.Acquire(ctx, name, 200*time.Millisecond)
		if l != nil {
			err = errors.Join(err, errors.New("A got a lease"))
		}
		got <- err
	}()
	select {
	case <-inPause:
	case err := <-got:
		t.Fatalf("A never reached the write-back: %v", err)
	case <-time.After(bound):
		t.Fatal("A never reached the write-back")
	}
	lb, err := b.Acquire(ctx, name, time.Minute) // once A's grants have expired
	if err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := recv(t, got, "A's acquisition"); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("A: %v, want ErrLeaseLost and no lease while B (fence %d) holds it", err, lb.Fence())
	}
	if n := holders(t, clients, name, lb.Token()); n < 3 {
		t.Fatalf("B's lease on %d of 5 servers after A's write-back", n)
	}
}
