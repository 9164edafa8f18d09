package notify

// A silent redial (go-redis redials inside a call that then succeeds, and
// resubscribes every channel it keeps in one SUBSCRIBE) while one share's
// SUBSCRIBE is confirmed by nobody yet: the confirmations of the new
// socket come in go-redis' order, and the break is seen only at the first
// channel confirmed twice.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// Simulated on the receiver's two calls per confirmation (resubscribed,
// then confirm): y, b's channel, is confirmed first on the new socket (its
// confirmation on the old one never read), then x, a's, confirmed on both.
// The break is seen at x: every share's OnReset runs, b's included, after
// b's OnListening ran for y's confirmation, and heard forgets y. No
// confirmation of y follows on this socket: b is left not listening (its
// L1 off) and never vouched for (no heartbeat trust) until the next break.
func TestSilentRedialLeavesNoShareUnlistened(t *testing.T) {
	rdb := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	x, y := prefix+":x", prefix+":y"
	a, b := newNotifier(rdb), newNotifier(rdb)
	defer b.Close()
	defer a.Close()
	var bSynced atomic.Bool
	b.OnReset = func() { bSynced.Store(false) }
	b.OnListening = func() { bSynced.Store(true) }
	if err := a.Listen(ctx, x, func(string) {}); err != nil {
		t.Fatal(err)
	}
	if err := b.Listen(ctx, y, func(string) {}); err != nil {
		t.Fatal(err)
	}
	b.Heartbeat(time.Hour, 1, func() int64 { return 1 }, func(uint64, int64) {})
	a.mu.Lock()
	c := a.conns[""]
	delete(c.heard, y) // as if y's SUBSCRIBE's confirmation was lost with the old socket
	a.mu.Unlock()
	session := a.Session()
	for _, ch := range []string{y, x} { // the new socket's resubscription, in go-redis' order
		a.hub.resubscribed(c, "subscribe", ch)
		a.hub.confirm(c, "subscribe", ch)
	}
	if a.Session() == session {
		t.Fatal("the silent redial was not seen")
	}
	// Whatever the hub does about it, it is done within a round trip.
	var vouchable bool
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		vouchable = a.hub.vouchableLocked(b, c)
		a.mu.Unlock()
		if (vouchable && bSynced.Load()) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // the receiver answers asynchronously: poll
	}
	if !bSynced.Load() || !vouchable {
		t.Errorf("after the silent redial, with y subscribed on the new socket: b listening %v, vouchable %v; nothing on this socket will confirm y again", bSynced.Load(), vouchable)
	}
}
