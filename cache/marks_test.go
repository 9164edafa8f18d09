package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// The marks' trust rules, against a read function that counts its calls:
// a mark read vouches for trust from when it was sent; an announcement
// raises a mark but vouches for nothing; an answer that comes back later
// than trust vouches for nothing (it is asked again, then the entry is
// unknown); an open breaker asks nothing.
func TestMarksTrust(t *testing.T) {
	ctx := context.Background()
	var reads atomic.Int32
	var latency, clock atomic.Int64 // the read's latency, and the marks' clock, moved by hand
	clock.Store(int64(time.Second))
	stored := map[string]mark{"": {}, "t": {hard: 3}, "u": {soft: 4}}
	up := true
	m := &marks{trust: 50 * time.Millisecond, clock: clock.Load,
		spawn:     func(string, func(context.Context)) {}, // no background re-reads: the test counts
		available: func() bool { return up },
		read: func(ctx context.Context, tags []string) ([]mark, error) {
			reads.Add(1)
			clock.Add(latency.Load()) // the answer takes this long
			out := make([]mark, len(tags))
			for i, tg := range tags {
				out[i] = stored[tg]
			}
			return out, nil
		}}
	check := func(st stamp, want invState) {
		t.Helper()
		if got, err := m.check(ctx, st); got != want {
			t.Fatalf("check %+v: %d (%v), want %d", st, got, err, want)
		}
	}
	check(stamp{gen: 1}, invValid)
	check(stamp{gen: 1}, invValid)
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads for two checks inside the trust window, want 1", n)
	}
	check(stamp{gen: 2, tags: []string{"t"}}, invHard)
	check(stamp{gen: 3, tags: []string{"t", "u"}}, invSoft)
	check(stamp{gen: 4, tags: []string{"t", "u"}}, invValid)
	// An announcement raises a mark at once, without a read.
	before := reads.Load()
	m.announced(announcement([]string{"t"}, 9, false))
	check(stamp{gen: 4, tags: []string{"t"}}, invHard)
	m.announced(announcement(nil, 10, true))
	check(stamp{gen: 9}, invSoft)
	if reads.Load() != before {
		t.Fatal("an announcement cost a read")
	}
	// Past the trust window the mark is read again.
	clock.Add(int64(60 * time.Millisecond))
	check(stamp{gen: 10}, invValid)
	if reads.Load() != before+1 {
		t.Fatalf("%d reads after the trust window, want 1", reads.Load()-before)
	}
	// An answer slower than the window vouches for nothing.
	latency.Store(int64(80 * time.Millisecond))
	clock.Add(int64(60 * time.Millisecond))
	before = reads.Load()
	check(stamp{gen: 10}, invUnknown)
	if n := reads.Load() - before; n != maxMarkReads {
		t.Fatalf("%d reads of a slow mark, want %d", n, maxMarkReads)
	}
	// The breaker open: nothing is asked.
	latency.Store(0)
	up = false
	before = reads.Load()
	if st, err := m.check(ctx, stamp{gen: 10}); st != invUnknown || !errors.Is(err, ErrUnavailable) || reads.Load() != before {
		t.Fatalf("breaker open: %d %v, %d reads", st, err, reads.Load()-before)
	}
}

// Process-local marks are the truth: never read, never stale.
func TestMarksLocal(t *testing.T) {
	m := &marks{local: true}
	m.raiseAll([]string{"t"}, 2, false)
	for _, tc := range []struct {
		st   stamp
		want invState
	}{{stamp{gen: 1, tags: []string{"t"}}, invHard}, {stamp{gen: 2, tags: []string{"t"}}, invValid}, {stamp{gen: 0}, invValid}} {
		if got, err := m.check(context.Background(), tc.st); got != tc.want || err != nil {
			t.Errorf("%+v: %d %v", tc.st, got, err)
		}
	}
}
