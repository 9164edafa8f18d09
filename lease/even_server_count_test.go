package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// Issue 25, case 6: even server counts were accepted silently. They are
// accepted, by decision (see NewQuorum): a majority is N/2+1, so two
// majorities of 2 or of 4 servers still share a server, and a lease needs
// 2 of 2 or 3 of 4; half the servers never grant one.
func TestQuorumOfAnEvenCountNeedsAStrictMajority(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(string(rune('0'+n)), func(t *testing.T) {
			ctx := context.Background()
			addrs, clients, kill := serverAddrs(t, n)
			q := newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{ServerTimeout: 500 * time.Millisecond})
			if got, want := q.Majority(), n/2+1; got != want {
				t.Fatalf("majority of %d = %d, want %d", n, got, want)
			}
			name := redistest.Prefix(t)
			// Another holder on half the servers: the other half is not enough.
			half := make([]int, n/2)
			for i := range half {
				half[i] = i
			}
			busyOn(t, clients, name, half...)
			if _, err := q.Acquire(ctx, name, time.Minute); !errors.Is(err, lease.ErrLeaseBusy) {
				t.Fatalf("with half of %d servers held by another: %v, want ErrLeaseBusy", n, err)
			}
			if got := holders(t, clients, name, "holder-h"); got != n/2 {
				t.Fatalf("the other holder's lease is on %d servers, want %d", got, n/2)
			}
			// Half the servers dead: no majority.
			for _, i := range half {
				kill(i)
			}
			if _, err := q.Acquire(ctx, name+":other", time.Minute); !errors.Is(err, lease.ErrNoQuorum) {
				t.Fatalf("with half of %d servers dead: %v, want ErrNoQuorum", n, err)
			}
		})
	}
}
