package notify

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// The heartbeat runs on the credit its Wants grant: a start buys
// beatGrant PINGs and no more when nothing wants it after; a Want after a
// quiet spell longer than beatReach periods leaves it stopped (a decision
// alone costs no PING), and so does one at once after it (a burst), while
// one a few periods later, within reach of it, starts it;
// Wants in period after period build up a run longer than one grant, up
// to the tail, which it keeps after the last.
func TestHeartbeatRunsOnTheCreditItsWantsGrant(t *testing.T) {
	rdb := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := newNotifier(rdb)
	defer n.Close()
	if err := n.Listen(ctx, redistest.Prefix(t)+":inv", func(string) {}); err != nil {
		t.Fatal(err)
	}
	const every, tail = 20 * time.Millisecond, 16
	var b beats
	n.Heartbeat(every, tail, func() int64 { return time.Now().UnixNano() }, b.fn)
	stopped := func(what string) int {
		t.Helper()
		waitFor(t, what, func() bool { return !n.Beating() })
		time.Sleep(2 * every) // the last PING's answer comes after its period ends: let it land
		return b.count()
	}

	n.Start()
	waitFor(t, "the started heartbeat's first answer", func() bool { return b.count() > 0 })
	if got := stopped("the heartbeat to stop after its start's grant"); got > beatGrant {
		t.Errorf("a start with no Want after it bought %d PINGs, want at most %d", got, beatGrant)
	}

	// A quiet spell past reach: a Want leaves the heartbeat stopped, and
	// so does another at once (a burst shows no rate).
	time.Sleep(beatReach*every + 5*every) // a quiet spell, not a wait for an event
	before := b.count()
	n.Want()
	n.Want()
	time.Sleep(4 * every) // room for a wrong start to show
	if n.Beating() || b.count() != before {
		t.Fatalf("a Want after a quiet spell started the heartbeat (%d PINGs answered)", b.count()-before)
	}
	// One a few periods later, within reach of it, starts it.
	n.Want()
	waitFor(t, "a Want within reach of the previous to start the heartbeat", func() bool { return b.count() > before })
	stopped("the heartbeat to stop again")

	// Wants in period after period: the run after the last is longer
	// than one grant, and no longer than the tail.
	n.Start()
	for range 3 * tail { // bounded
		time.Sleep(every) // the traffic's pace, not a wait for an event
		n.Want()
	}
	before = b.count()
	if !n.Beating() {
		t.Fatal("the heartbeat stopped while Wants came every period")
	}
	after := stopped("the heartbeat to stop after the last Want") - before
	if after <= beatGrant || after > tail+1 {
		t.Errorf("%d PINGs after the last of steady Wants, want more than one grant (%d) and at most the tail (%d)", after, beatGrant, tail)
	}
}
