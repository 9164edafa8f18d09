package marks

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A fence whose reads fail past two reads' bounds reads on while the
// failure is load, not silence (issue 39 item 10): this process starved
// of CPU (each failed read's end seen a quarter of a bound or more past
// its bound: the reply may have sat unread in its socket), or Redis
// answering this process's other steps. It used to give up after two
// bounds, and its Unknown let an answer computed before an
// InvalidateTags that had returned reach its caller unchecked, on a
// replica that could have read the mark (seed 1796604356989403235,
// redis-slow-fill, beside two CPU hogs). Reading on ends at Longest
// (WaitTimeout) past the two bounds, or at the caller's deadline; a silent
// Redis still costs two bounds (TestMarksFenceOnASilentRedisCostsTwoReadBounds).
func TestFenceReadsOnUnderLoad(t *testing.T) {
	const trust, longest = 100 * time.Millisecond, time.Second
	cases := []struct {
		name      string
		failed    int32         // reads that fail before one answers
		seenLate  time.Duration // how late each failed read's end is seen
		answering bool          // Redis answers this process's other steps
		want      State
		took      time.Duration
	}{
		{"starved", 3, 30 * time.Millisecond, false, Hard, 3 * (trust + 30*time.Millisecond)},
		{"redis answering other steps", 4, 0, true, Hard, 4 * trust},
		{"answering until Longest past the two bounds", 100, 0, true, Unknown, longest + 2*trust},
		{"slow, silent otherwise", 3, 0, false, Unknown, 2 * trust},
		{"starved but late by less than a quarter bound", 3, 20 * time.Millisecond, false, Unknown, 2 * (trust + 20*time.Millisecond)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var reads atomic.Int32
				m := &Marks{Trust: trust, Base: time.Now().Add(-time.Hour), Spawn: func(string, func(context.Context)) {},
					Longest:   longest,
					Answering: func(time.Duration) bool { return tc.answering },
					Read: func(ctx context.Context, tags []string) ([]Mark, error) {
						if reads.Add(1) > tc.failed {
							return []Mark{{Hard: 5}}, nil // the invalidation's mark
						}
						<-ctx.Done() // cut at its bound
						time.Sleep(tc.seenLate)
						return nil, ctx.Err()
					}}
				start := time.Now()
				st, err := m.CheckFence(context.Background(), Stamp{Gen: 3})
				took := time.Since(start)
				if st != tc.want || took != tc.took {
					t.Errorf("fence: %d (%v) after %d reads and %s, want %d after %s", st, err, reads.Load(), took, tc.want, tc.took)
				}
				time.Sleep(time.Second) // on the bubble's clock: a read its caller left ends
			})
		})
	}
}

// The fence's reads on under load end at its caller's deadline too.
func TestFenceReadsOnUntilItsCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &Marks{Trust: 100 * time.Millisecond, Base: time.Now().Add(-time.Hour), Spawn: func(string, func(context.Context)) {},
			Longest:   10 * time.Second,
			Answering: func(time.Duration) bool { return true },
			Read: func(ctx context.Context, tags []string) ([]Mark, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}}
		ctx, cancel := context.WithTimeout(context.Background(), 450*time.Millisecond)
		defer cancel()
		start := time.Now()
		st, err := m.CheckFence(ctx, Stamp{Gen: 3})
		if took := time.Since(start); st != Unknown || err == nil || took != 450*time.Millisecond {
			t.Errorf("fence: %d %v after %s, want Unknown with an error at the caller's deadline, 450ms", st, err, took)
		}
		time.Sleep(time.Second) // on the bubble's clock: the read its caller left ends
	})
}

// A fence whose read answered late with a hard invalidation, and whose read
// sent again for the answer's moment failed, judges Hard: marks only go
// up. It judged Unknown, which let the invalidated answer through (the
// slowing rounds of redis-persist-busyerror, once each answer met one
// fence: the read that saw the mark came 160 ms after it was sent, the one
// sent again ran into the fence's end).
func TestFenceKeepsAHardMarkItReadLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reads atomic.Int32
		m := &Marks{Trust: 100 * time.Millisecond, Base: time.Now().Add(-time.Hour), Spawn: func(string, func(context.Context)) {},
			Read: func(ctx context.Context, tags []string) ([]Mark, error) {
				if reads.Add(1) == 1 {
					time.Sleep(160 * time.Millisecond) // answered late: read once more
					return []Mark{{Hard: 5}, {Hard: 5}}, nil
				}
				return nil, errors.New("test: the read sent again failed")
			}}
		st, err := m.CheckFence(context.Background(), Stamp{Gen: 3, Tags: []string{"t"}})
		if st != Hard {
			t.Errorf("fence: %d (%v) after %d reads, want Hard: the first read saw the mark", st, err, reads.Load())
		}
		time.Sleep(time.Second) // on the bubble's clock: a read its caller left ends
	})
}
