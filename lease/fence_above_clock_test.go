package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// aboveClock is a fence far above any server clock in microseconds (the
// year 2096), below 2^53 so that Lua's numbers hold it exactly: fences
// seeded here rise by the counter alone, not by the clock term.
const aboveClock = int64(4_000_000_000_000_000)

// The fence moves on by one per acquisition also where the server's clock
// is far behind it (a fence key written by a server whose clock ran ahead):
// the clock term of max(previous + 1, clock) does not hide the counter.
func TestFenceAboveTheClockRisesByOne(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	c := newClient(t, rdb, lease.Options{})
	name := redistest.Prefix(t)
	_, fenceKey := lease.Keys(name)
	if err := rdb.Set(ctx, fenceKey, aboveClock, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 3; i++ {
		l, err := c.Acquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() != aboveClock+i {
			t.Fatalf("acquisition %d: fence %d, want %d", i, l.Fence(), aboveClock+i)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A quorum's fence is one above the largest floor its majority holds, also
// where the floors are above every server's clock; a majority holds it
// when Acquire returns, and no server holds more.
func TestQuorumFenceAboveTheClockRisesByOne(t *testing.T) {
	ctx := context.Background()
	addrs, clients, _ := serverAddrs(t, 5)
	q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{})
	name := redistest.Prefix(t)
	_, fenceKey := lease.Keys(name)
	for i, c := range clients { // floors differ from server to server
		if err := c.Set(ctx, fenceKey, aboveClock+int64(10*i), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	want := aboveClock + 40
	for i := 1; i <= 3; i++ {
		want++
		l, err := q.Acquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() != want {
			t.Fatalf("acquisition %d: fence %d, want %d", i, l.Fence(), want)
		}
		// The write-back returned once a majority took it.
		took := 0
		for j, c := range clients {
			got, err := c.Get(ctx, fenceKey).Int64()
			if err != nil || got > want {
				t.Fatalf("acquisition %d: server %d holds fence %d (%v), above %d", i, j, got, err, want)
			}
			if got == want {
				took++
			}
		}
		if took < q.Majority() {
			t.Fatalf("acquisition %d: fence %d on %d of 5 servers", i, want, took)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
