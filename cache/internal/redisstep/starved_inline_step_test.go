package redisstep

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A step cut inline on its socket at its budget (a client that honours
// deadlines, a context that cannot be cancelled) whose cut this process
// saw late fails as load (UnderLoad), never as an outage that counts
// towards the breaker and sends its caller to compute locally: the process
// was starved of CPU, and a reply may have sat unread in its socket. A
// step on a goroutine whose budget's timer fired late is judged so too.
func TestAStepCutLateInlineIsLoad(t *testing.T) {
	// No step below uses the client: the budget only reads its options.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	errTimeout := errors.New("test: past the budget")
	const d = 50 * time.Millisecond
	b := NewBudget(d, time.Second, rdb, errTimeout)
	t.Cleanup(func() { b.Release(rdb) })
	b.h.replied(time.Millisecond) // Redis answered quickly, d ago by the time of the cut
	inline := false
	_, err := Run(context.Background(), b, func(ctx context.Context) (string, error) {
		dl, _ := ctx.Deadline()
		inline = time.Until(dl) <= d // bounded by the budget itself, not by its ceiling
		<-ctx.Done()
		// What a starved process does: its goroutine runs again a whole
		// budget after the deadline that cut the read.
		time.Sleep(d)
		return "", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	})
	if !inline {
		t.Fatal("the step did not run inline: the test does not reach the path it pins")
	}
	if !errors.Is(err, errTimeout) || !UnderLoad(err) {
		t.Errorf("a step cut late inline: %v; want the budget's timeout marked as load", err)
	}
}
