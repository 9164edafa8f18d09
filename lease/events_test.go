package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// recorder keeps the events it observes.
type recorder struct {
	mu     sync.Mutex
	events []lease.Event
}

func (r *recorder) Observe(_ context.Context, e lease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) take() []lease.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

func kinds(events []lease.Event) map[lease.EventKind]int {
	out := map[lease.EventKind]int{}
	for _, e := range events {
		out[e.Kind]++
	}
	return out
}

// A quorum with one of three servers dead: the acquisition reports the
// failed server and the time it took; the release reports how much of the
// validity was left; contention and a rejected release are reported too.
func TestQuorumEvents(t *testing.T) {
	ctx := context.Background()
	addrs, _, kill := serverAddrs(t, 3)
	rec := &recorder{}
	q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{Options: lease.Options{Observer: rec}, ServerTimeout: 500 * time.Millisecond})
	kill(2)
	name := redistest.Prefix(t)
	const ttl = 10 * time.Second
	l, err := q.Acquire(ctx, name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	got := rec.take()
	if k := kinds(got); k[lease.EventRedisError] != 1 || k[lease.EventAcquired] != 1 || len(got) != 2 {
		t.Fatalf("acquire events %v", got)
	}
	if e := got[len(got)-1]; e.Kind != lease.EventAcquired || e.Duration <= 0 || e.Fence != l.Fence() || e.Name != name {
		t.Fatalf("acquired event %+v", e)
	}
	if _, err := q.Acquire(ctx, name, ttl); !errors.Is(err, lease.ErrLeaseBusy) {
		t.Fatal(err)
	}
	if k := kinds(rec.take()); k[lease.EventBusy] != 1 {
		t.Fatalf("busy events %v", k)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var released *lease.Event
	for _, e := range rec.take() {
		if e.Kind == lease.EventReleased {
			released = &e
		}
	}
	if released == nil || released.Remaining <= 0 || released.Remaining > ttl {
		t.Fatalf("released event %+v, want the validity left in (0, %s]", released, ttl)
	}
	if err := l.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatal(err)
	}
	if k := kinds(rec.take()); k[lease.EventReleaseRejected] != 1 {
		t.Fatalf("rejected release events %v", k)
	}
	if lease.EventReleaseRejected.String() != "release_rejected" || lease.EventKind(200).String() != "unknown" {
		t.Fatal("event kind names")
	}
}
