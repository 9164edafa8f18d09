package marks

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The marks' trust rules, against a read function that counts its calls:
// a mark read vouches for trust from when it was sent; an announcement
// raises a mark but vouches for nothing; an answer that comes back later
// than trust still vouches for the decision it was sent for (a distant
// Redis costs a read, not the entry); a read that fails leaves the entry
// unknown; an open breaker asks nothing, and its error
// matches the sentinel the cache hands in.
func TestMarksTrust(t *testing.T) {
	ctx := context.Background()
	var reads atomic.Int32
	var latency, clock atomic.Int64 // the read's latency, and the marks' clock, moved by hand
	clock.Store(int64(time.Second))
	stored := map[string]Mark{"": {}, "t": {Hard: 3}, "u": {Soft: 4}}
	up, failing := true, false
	m := &Marks{Trust: 50 * time.Millisecond, Clock: clock.Load,
		Spawn:          func(string, func(context.Context)) {}, // no background re-reads: the test counts
		Available:      func() bool { return up },
		ErrUnavailable: errUnavailable,
		Read: func(ctx context.Context, tags []string) ([]Mark, error) {
			reads.Add(1)
			clock.Add(latency.Load()) // the answer takes this long
			if failing {
				return nil, errors.New("test: read failed")
			}
			out := make([]Mark, len(tags))
			for i, tg := range tags {
				out[i] = stored[tg]
			}
			return out, nil
		}}
	check := func(st Stamp, want State) {
		t.Helper()
		if got, err := m.check(ctx, st); got != want {
			t.Fatalf("check %+v: %d (%v), want %d", st, got, err, want)
		}
	}
	check(Stamp{Gen: 1}, Valid)
	check(Stamp{Gen: 1}, Valid)
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads for two checks inside the trust window, want 1", n)
	}
	check(Stamp{Gen: 2, Tags: []string{"t"}}, Hard)
	check(Stamp{Gen: 3, Tags: []string{"t", "u"}}, Soft)
	check(Stamp{Gen: 4, Tags: []string{"t", "u"}}, Valid)
	// An announcement raises a mark at once, without a read.
	before := reads.Load()
	m.Announced(Announcement([]string{"t"}, 9, false))
	check(Stamp{Gen: 4, Tags: []string{"t"}}, Hard)
	m.Announced(Announcement(nil, 10, true))
	check(Stamp{Gen: 9}, Soft)
	if reads.Load() != before {
		t.Fatal("an announcement cost a read")
	}
	// Past the trust window the mark is read again.
	clock.Add(int64(60 * time.Millisecond))
	check(Stamp{Gen: 10}, Valid)
	if reads.Load() != before+1 {
		t.Fatalf("%d reads after the trust window, want 1", reads.Load()-before)
	}
	// An answer slower than the window vouches for the decision it was
	// sent for: one read, and the mark's verdict.
	latency.Store(int64(80 * time.Millisecond))
	clock.Add(int64(60 * time.Millisecond))
	before = reads.Load()
	check(Stamp{Gen: 10}, Valid)
	check(Stamp{Gen: 10, Tags: []string{"u"}}, Valid)
	if n := reads.Load() - before; n != 2 {
		t.Fatalf("%d reads of a slow mark for two decisions, want 2", n)
	}
	// A read that fails vouches for nothing, and is not sent again: the
	// entry is unknown.
	latency.Store(0)
	clock.Add(int64(60 * time.Millisecond))
	failing = true
	before = reads.Load()
	if st, err := m.check(ctx, Stamp{Gen: 10}); st != Unknown || err == nil {
		t.Fatalf("marks unreadable: %d %v, want Unknown and an error", st, err)
	}
	if n := reads.Load() - before; n != 1 {
		t.Fatalf("%d reads of an unreadable mark, want 1", n)
	}
	failing = false
	// The breaker open: nothing is asked.
	latency.Store(0)
	up = false
	before = reads.Load()
	if st, err := m.check(ctx, Stamp{Gen: 10}); st != Unknown || !errors.Is(err, errUnavailable) || reads.Load() != before {
		t.Fatalf("breaker open: %d %v, %d reads", st, err, reads.Load()-before)
	}
}

// A read vouches for a decision whose moment came before it was sent,
// however late its answer, and not for one whose moment came more than
// trust after it was sent: a check that joined such a read in flight
// reads again.
func TestMarksReadVouchesFromItsSending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var reads atomic.Int32
		var clock atomic.Int64
		clock.Store(int64(time.Second))
		release := make(chan struct{})
		m := &Marks{Trust: 50 * time.Millisecond, Clock: clock.Load,
			Spawn: func(string, func(context.Context)) {},
			Read: func(ctx context.Context, tags []string) ([]Mark, error) {
				if reads.Add(1) == 1 {
					<-release // the first read's answer is slow
				}
				return []Mark{{Hard: 5}}, nil
			}}
		var first, second State
		var wg sync.WaitGroup
		wg.Go(func() { first, _ = m.check(ctx, Stamp{Gen: 3}) })
		synctest.Wait()                         // its read is in flight
		clock.Add(int64(80 * time.Millisecond)) // past trust since that read was sent
		wg.Go(func() { second, _ = m.check(ctx, Stamp{Gen: 7}) })
		synctest.Wait() // the second check joined the read in flight
		close(release)
		wg.Wait()
		if first != Hard || second != Valid {
			t.Errorf("verdicts %d and %d, want Hard (the slow read vouches for the first) and Valid", first, second)
		}
		if n := reads.Load(); n != 2 {
			t.Errorf("%d reads, want 2: the second check may not rely on a read sent 80 ms before its moment", n)
		}
	})
}

// The fence at an answer's moment: a read whose answer came δ or more after
// it was sent is read once more, and the answer judged by the second read.
// A mark raised after Redis ran the first read, by an invalidation that
// returns before the late answer is used, refuses the answer; a decision
// taken before the read (CheckAt) may use the first.
func TestMarksFenceReadsAgainAfterALateAnswer(t *testing.T) {
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(int64(time.Second))
	var reads atomic.Int32
	late := int64(200 * time.Millisecond) // the first answer of each check: a lost packet sent again
	var mark atomic.Uint64
	newMarks := func() *Marks {
		return &Marks{Trust: 100 * time.Millisecond, Clock: clock.Load,
			Spawn: func(string, func(context.Context)) {},
			Read: func(ctx context.Context, tags []string) ([]Mark, error) {
				got := Mark{Hard: mark.Load()} // as Redis runs the read
				if reads.Add(1)%2 == 1 {
					mark.Store(5)   // an invalidation writes its mark just after
					clock.Add(late) // and returns (after δ) before this answer arrives
				}
				return []Mark{got}, nil
			}}
	}
	if st, err := newMarks().CheckFence(ctx, Stamp{Gen: 3}); st != Hard || err != nil {
		t.Errorf("fence after a late answer: %d %v, want Hard (the second read saw the mark)", st, err)
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads for the fence, want 2", n)
	}
	mark.Store(0)
	reads.Store(0)
	if st, err := newMarks().CheckAt(ctx, Stamp{Gen: 3}, 0); st != Valid || err != nil {
		t.Errorf("decision taken before the late read: %d %v, want Valid (the read vouches for it)", st, err)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads for a decision, want 1", n)
	}
	mark.Store(0)
	reads.Store(0)
	late = 0
	if st, err := newMarks().CheckFence(ctx, Stamp{Gen: 3}); st != Valid || err != nil || reads.Load() != 1 {
		t.Errorf("fence with a prompt answer: %d %v after %d reads, want Valid after 1", st, err, reads.Load())
	}
}

// A failed read leaves a decision Unknown (its entry refused) at once, but
// the fence, where Unknown would let an answer through unchecked, reads
// again.
func TestMarksFenceRetriesAFailedRead(t *testing.T) {
	ctx := context.Background()
	var reads atomic.Int32
	newMarks := func() *Marks {
		reads.Store(0)
		return &Marks{Trust: 100 * time.Millisecond, Spawn: func(string, func(context.Context)) {},
			Read: func(ctx context.Context, tags []string) ([]Mark, error) {
				if reads.Add(1) <= 2 {
					return nil, errors.New("test: read timed out under load")
				}
				return []Mark{{Hard: 5}}, nil
			}}
	}
	if st, err := newMarks().CheckAt(ctx, Stamp{Gen: 3}, 0); st != Unknown || err == nil || reads.Load() != 1 {
		t.Errorf("decision after a failed read: %d %v after %d reads, want Unknown with an error after 1", st, err, reads.Load())
	}
	if st, err := newMarks().CheckFence(ctx, Stamp{Gen: 3}); st != Hard || err != nil || reads.Load() != 3 {
		t.Errorf("fence after two failed reads: %d %v after %d reads, want Hard after 3", st, err, reads.Load())
	}
}

// A silent Redis costs the fence two reads' bounds, not one bound per
// read it may send: the failed reads are sent again only within that
// time. (It cost maxMarkReads bounds, and a waiter answered a budget late.)
func TestMarksFenceOnASilentRedisCostsTwoReadBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reads atomic.Int32
		const patience = 300 * time.Millisecond // above Trust: the round trip Redis showed lately
		m := &Marks{Trust: 100 * time.Millisecond, Base: time.Now().Add(-time.Hour), Spawn: func(string, func(context.Context)) {},
			Patience: func() time.Duration { return patience },
			Read: func(ctx context.Context, tags []string) ([]Mark, error) {
				reads.Add(1)
				<-ctx.Done() // Redis never answers
				return nil, ctx.Err()
			}}
		start := time.Now()
		st, err := m.CheckFence(context.Background(), Stamp{Gen: 3})
		if took := time.Since(start); st != Unknown || err == nil || took != 2*patience || reads.Load() != 2 {
			t.Errorf("fence on a silent Redis: %d %v after %d reads and %s, want Unknown with an error after 2 reads and %s",
				st, err, reads.Load(), took, 2*patience)
		}
	})
}

// Process-local marks are the truth: never read, never stale.
func TestMarksLocal(t *testing.T) {
	m := &Marks{Local: true}
	m.RaiseAll([]string{"t"}, 2, false)
	for _, tc := range []struct {
		st   Stamp
		want State
	}{{Stamp{Gen: 1, Tags: []string{"t"}}, Hard}, {Stamp{Gen: 2, Tags: []string{"t"}}, Valid}, {Stamp{Gen: 0}, Valid}} {
		if got, err := m.check(context.Background(), tc.st); got != tc.want || err != nil {
			t.Errorf("%+v: %d %v", tc.st, got, err)
		}
	}
}

// errUnavailable stands for cache.ErrUnavailable, which cache hands in.
var errUnavailable = errors.New("test: Redis unavailable")

// SoftAbove says whether a soft mark of a stamp's tags or of the
// namespace is above both its generation and a floor read earlier: a soft
// invalidation the process learnt of after that floor. Hard marks and
// other tags' marks do not count; what is known is judged, nothing read.
func TestSoftAboveJudgesAgainstTheFloor(t *testing.T) {
	m := &Marks{Local: true}
	m.RaiseAll([]string{"t"}, 5, true)  // soft, seen before the floor
	m.RaiseAll([]string{"h"}, 9, false) // hard: not SoftAbove's to judge
	m.RaiseAll([]string{"o"}, 9, true)  // another tag's
	floor := uint64(5)
	for _, tc := range []struct {
		st   Stamp
		want bool
	}{
		{Stamp{Gen: 3, Tags: []string{"t"}}, false}, // expired before the floor
		{Stamp{Gen: 3, Tags: []string{"h"}}, false},
		{Stamp{Gen: 3, Tags: []string{"u"}}, false},
		{Stamp{Gen: 6, Tags: []string{"t"}}, false},
	} {
		if got := m.SoftAbove(tc.st, floor); got != tc.want {
			t.Errorf("SoftAbove(%+v, %d) = %v, want %v", tc.st, floor, got, tc.want)
		}
	}
	m.RaiseAll([]string{"t"}, 7, true) // after the floor
	if !m.SoftAbove(Stamp{Gen: 3, Tags: []string{"u", "t"}}, floor) {
		t.Error("a soft mark raised after the floor was not above it")
	}
	if m.SoftAbove(Stamp{Gen: 7, Tags: []string{"t"}}, floor) {
		t.Error("a soft mark not above the stamp's own generation counted")
	}
	m.RaiseAll(nil, 8, true) // the namespace's, soft
	if !m.SoftAbove(m.Resolve(Stamp{Gen: 7}), floor) {
		t.Error("the namespace's soft mark above the floor did not count")
	}
}
