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

// virtualClock is a clock that moves only when told: waiting on it moves
// it on by the wait at once, and a job moves it on by its duration.
type virtualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *virtualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *virtualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *virtualClock) after(d time.Duration) <-chan time.Time {
	c.advance(d)
	ch := make(chan time.Time, 1)
	ch <- c.now()
	return ch
}

// Issue 25, case 4. RunEvery starts its calls every interval, start to
// start: a 100 ms job at a 150 ms interval starts every 150 ms, not every
// 250 ms. A job longer than the interval delays the next, which starts as
// soon as it returns. Counted on a virtual clock: ten calls, no waiting.
func TestRunEveryStartToStart(t *testing.T) {
	for _, tc := range []struct {
		work, interval, want time.Duration
	}{
		{100 * time.Millisecond, 150 * time.Millisecond, 150 * time.Millisecond},
		{200 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond},
		{0, time.Hour, time.Hour},
	} {
		t.Run(tc.work.String()+"/"+tc.interval.String(), func(t *testing.T) {
			e := newElection(t, newClient(t, redistest.Client(t), lease.Options{}), redistest.Prefix(t), lease.ElectionOptions{})
			clock := &virtualClock{t: time.Unix(1_000_000, 0)}
			lease.SetElectionClock(e, clock.now, clock.after)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var starts []time.Time
			err := e.RunEvery(ctx, tc.interval, func(context.Context) error {
				starts = append(starts, clock.now())
				clock.advance(tc.work)
				if len(starts) == 10 {
					cancel()
				}
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("RunEvery: %v", err)
			}
			for i := 1; i < len(starts); i++ {
				if d := starts[i].Sub(starts[i-1]); d != tc.want {
					t.Fatalf("call %d started %s after call %d, want %s", i, d, i-1, tc.want)
				}
			}
		})
	}
}
