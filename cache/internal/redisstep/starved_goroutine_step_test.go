package redisstep

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A step on a goroutine whose budget's timer this process took late (the
// process starved of CPU: the timer was due, and replies may sit unread in
// its sockets) is given another budget, not judged silent. The time a Go
// timer sends is when it was due (Go 1.23), not when its receiver took it:
// measured on that time, the lateness was always about zero, and a starved
// process read its late replies as an outage (issue 39 item 10; the
// robustness suite's pausing rounds showed it: "ran past RedisTimeout
// (250ms, no reply from Redis meanwhile)" from a replica paused 700 ms).
//
// The starving needs a process of its own: this test runs itself again with
// one P and no asynchronous preemption, where a goroutine that spins holds
// the only P, so the budget's timer, due at d, is taken about 4d late.
func TestAStepOnAGoroutineTakenLateIsLoad(t *testing.T) {
	if os.Getenv("STAMPEDE_STARVED_STEP") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAStepOnAGoroutineTakenLateIsLoad$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "STAMPEDE_STARVED_STEP=1", "GOMAXPROCS=1", "GODEBUG=asyncpreemptoff=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the starved process: %v\n%s", err, out)
		}
		return
	}
	// No step below uses the client: the budget only reads its options.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	errTimeout := errors.New("test: past the budget")
	const d = 50 * time.Millisecond
	b := NewBudget(d, time.Second, rdb, errTimeout)
	t.Cleanup(func() { b.Release(rdb) })
	b.h.replied(time.Millisecond) // Redis answered quickly, before the starving
	// The starving: a loop without a call in it (no preemption point)
	// holds this process's only P about 4d; its length is measured first.
	const probe = 1 << 24
	t0 := time.Now()
	spin(probe)
	n := int(float64(probe) * float64(4*d) / float64(max(time.Since(t0), time.Microsecond)))
	reply := make(chan struct{})
	time.AfterFunc(10*time.Millisecond, func() {
		spin(n)
		// The reply is read just after the process runs again, as one
		// that sat in its socket.
		time.AfterFunc(time.Millisecond, func() { close(reply) })
	})
	ctx, cancel := context.WithCancel(context.Background()) // cancellable: the step runs on a goroutine
	defer cancel()
	start := time.Now()
	v, err := Run(ctx, b, func(ctx context.Context) (string, error) {
		select {
		case <-reply:
			return "PONG", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	if err != nil || v != "PONG" {
		t.Errorf("a step whose budget's timer was taken %s late: %q, %v; want its reply", time.Since(start)-d, v, err)
	}
}

// spinSink keeps spin's loop from being optimised away.
var spinSink int

// spin runs n iterations of a loop with no call in it.
//
//go:noinline
func spin(n int) {
	x := 0
	for i := 0; i < n; i++ {
		x += i ^ x
	}
	spinSink = x
}
