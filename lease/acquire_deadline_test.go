package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// Issue 39, item 8. Quorum.Acquire returns by its caller's deadline: the
// release of the failed attempt (which ran detached, for a whole
// ServerTimeout, so that a cancelled caller leaves nothing held) goes on
// in the background instead of holding the caller. Every message to the
// servers is held at their proxies; a 100 ms context must end Acquire long
// before the 3 s ServerTimeout. Once the messages are let through, the
// background release gives the lease back (another holder gets it at once,
// not after its minute's TTL) and its goroutine ends.
func TestQuorumAcquireReturnsByTheCallersDeadline(t *testing.T) {
	addrs, _, _ := serverAddrs(t, 3)
	proxies, proxied := newProxies(t, addrs)
	q := newQuorum(t, replicaClients(t, proxied), lease.QuorumOptions{ServerTimeout: 3 * time.Second})
	name := redistest.Prefix(t)
	// Connections open and scripts loaded before the network stalls.
	warm, err := q.Acquire(context.Background(), name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		holdQuiet(t, p)
	}
	const wait = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	l, err := q.Acquire(ctx, name, time.Minute)
	took := time.Since(start)
	t.Logf("Acquire with a %s context returned after %s", wait, took.Round(time.Millisecond))
	if err == nil {
		t.Fatalf("Acquire held nothing back and still won the lease: %v", l)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire: %v, want context.DeadlineExceeded", err)
	}
	if took > wait+time.Second {
		t.Errorf("Acquire returned %s after its caller's %s deadline", (took - wait).Round(time.Millisecond), wait)
	}
	for _, p := range proxies {
		p.SetHold(false)
	}
	// Another holder, straight to the servers, retrying while busy.
	b := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{Options: lease.Options{Retries: 1 << 20, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond}})
	bctx, bcancel := context.WithTimeout(context.Background(), bound)
	defer bcancel()
	lb, err := b.Acquire(bctx, name, time.Second)
	if err != nil {
		t.Fatalf("after the held messages went through, another holder could not take the lease: %v", err)
	}
	if err := lb.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(bound) // a bound on a failure, not a synchronisation
	for leakcheck.CountFrames("lease.detached") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background release is still running")
		}
		time.Sleep(time.Millisecond) // goroutines end unobservably: poll
	}
}
