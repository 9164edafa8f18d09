package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// grantFailures is an Observer that counts the servers that failed a grant
// (one per failed server per acquisition attempt) and the busy attempts.
type grantFailures struct{ failed, busy atomic.Int32 }

func (g *grantFailures) Observe(_ context.Context, e lease.Event) {
	switch {
	case e.Kind == lease.EventBusy:
		g.busy.Add(1)
	case e.Kind == lease.EventRedisError && strings.Contains(e.Err.Error(), "acquire"):
		g.failed.Add(1)
	}
}

// Issue 25, case 6: Options.Retries says Acquire tries again after finding
// the lease busy, but a Quorum retried on every error, so a majority down
// cost 1+Retries attempts, each a ServerTimeout and a backoff. It fails at
// once, and still retries while the lease is busy.
func TestQuorumRetriesOnlyWhenBusy(t *testing.T) {
	ctx := context.Background()
	addrs, clients, kill := serverAddrs(t, 3)
	obs := &grantFailures{}
	opts := lease.Options{Retries: 5, RetryBase: 20 * time.Millisecond, RetryMax: 20 * time.Millisecond, Observer: obs}
	q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{Options: opts, ServerTimeout: 500 * time.Millisecond})
	name := redistest.Prefix(t)

	busyOn(t, clients, name, 0, 1)
	if _, err := q.Acquire(ctx, name, time.Minute); !errors.Is(err, lease.ErrLeaseBusy) {
		t.Fatalf("held by another: %v, want ErrLeaseBusy", err)
	}
	if got := obs.busy.Load(); got != 6 {
		t.Errorf("%d busy attempts, want 1 + 5 retries", got)
	}

	kill(0)
	kill(1)
	if _, err := q.Acquire(ctx, name+":down", time.Minute); !errors.Is(err, lease.ErrNoQuorum) {
		t.Fatalf("a majority down: %v, want ErrNoQuorum", err)
	}
	if got := obs.failed.Load(); got != 2 {
		t.Errorf("%d failed grants, want 2 (one attempt on two dead servers): retried on an error", got)
	}
}

// A Client retries only when busy too.
func TestClientRetriesOnlyWhenBusy(t *testing.T) {
	addrs, _, kill := serverAddrs(t, 1)
	obs := &grantFailures{}
	c := newClient(t, replicaClients(t, addrs)[0], lease.Options{Retries: 5, RetryBase: 20 * time.Millisecond, Observer: obs})
	kill(0)
	if _, err := c.Acquire(context.Background(), redistest.Prefix(t), time.Minute); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Redis down: %v, want ErrUnavailable", err)
	}
	if got := obs.failed.Load(); got != 1 {
		t.Errorf("%d failed attempts, want 1", got)
	}
}
