package marks

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The subscription's heartbeat vouches for a mark only when the mark was
// read after a heartbeat of the live session was answered, and only for
// trust from the newest heartbeat of that session; a break (a new session)
// withdraws it at once, even from a heartbeat credited late, and a mark
// read before the subscription was confirmed is vouched for by its read
// alone.
func TestMarksTrustedByTheHeartbeat(t *testing.T) {
	ctx := context.Background()
	const trust = 50 * time.Millisecond
	var reads atomic.Int32
	var clock atomic.Int64
	var session atomic.Uint64
	clock.Store(int64(time.Second))
	session.Store(1)
	m := &Marks{Trust: trust, Clock: clock.Load, Session: session.Load,
		Spawn: func(string, func(context.Context)) {}, // no background re-reads: the test counts
		Read: func(_ context.Context, tags []string) ([]Mark, error) {
			reads.Add(1)
			return make([]Mark, len(tags)), nil
		}}
	// check checks an entry of generation 1 tagged "t", which must be
	// valid, and counts the reads it made.
	check := func(what string, wantReads int32) {
		t.Helper()
		before := reads.Load()
		if st, err := m.check(ctx, Stamp{Gen: 1, Tags: []string{"t"}}); st != Valid || err != nil {
			t.Fatalf("%s: %d %v", what, st, err)
		}
		if n := reads.Load() - before; n != wantReads {
			t.Fatalf("%s: %d reads, want %d", what, n, wantReads)
		}
	}
	advance := func(d time.Duration) { clock.Add(int64(d)) }

	check("first check", 1) // read before any heartbeat: not covered
	advance(trust)
	m.Beaten(1, clock.Load())
	check("past its read's trust, read before the subscription was confirmed", 1) // covered from now on
	advance(trust / 2)
	m.Beaten(1, clock.Load())
	advance(trust * 3 / 4)
	check("past its read's trust, a heartbeat answered since", 0)
	advance(trust)
	check("the heartbeats late", 1)
	m.Beaten(1, clock.Load())
	advance(trust * 3 / 4)
	check("read in the session, a heartbeat answered since", 0)

	// A break: the session moves on before anything else is read.
	session.Add(1)
	check("after a break, the read's own trust", 0)
	advance(trust)
	m.Beaten(1, clock.Load()) // credited after the break: ignored
	check("after a break, a late heartbeat of the old session", 1)
	advance(trust)
	m.Beaten(2, clock.Load())
	check("read before the new session was confirmed", 1)
	advance(trust * 3 / 4)
	m.Beaten(2, clock.Load())
	advance(trust / 2)
	check("read in the new session", 0)

	// An announcement raises a vouched mark at once.
	m.Announced(Announcement([]string{"t"}, 5, false))
	if st, _ := m.check(ctx, Stamp{Gen: 1, Tags: []string{"t"}}); st != Hard {
		t.Fatalf("after an announcement: %d", st)
	}
}

// A decision wants the heartbeat once, as it begins: its check tells the
// heartbeat (Want) when no read vouches for a mark on its own, and its
// fence (CheckFence), however long after, does not, so that one slow
// decision is not taken for two close together, which would start a
// stopped heartbeat (internal/notify's Want) for a process used seldom.
func TestADecisionWantsTheHeartbeatOnce(t *testing.T) {
	ctx := context.Background()
	const trust = 100 * time.Millisecond
	var wants atomic.Int32
	var clock atomic.Int64
	clock.Store(int64(time.Second))
	m := &Marks{Trust: trust, Clock: clock.Load, Session: func() uint64 { return 1 },
		Want:  func() { wants.Add(1) },
		Spawn: func(string, func(context.Context)) {},
		Read: func(_ context.Context, tags []string) ([]Mark, error) {
			return make([]Mark, len(tags)), nil
		}}
	st := Stamp{Gen: 1} // the namespace's mark alone: one Want per check that asks
	if s, err := m.check(ctx, st); s != Valid || err != nil {
		t.Fatalf("check: %d %v", s, err)
	}
	if n := wants.Load(); n != 1 {
		t.Fatalf("a check that found no read told the heartbeat %d times, want once", n)
	}
	clock.Add(int64(trust * 3 / 4)) // a slow compute: its read is past half its trust
	if s, err := m.CheckFence(ctx, st); s != Valid || err != nil {
		t.Fatalf("fence: %d %v", s, err)
	}
	clock.Add(int64(2 * trust)) // and past all of it
	if s, err := m.CheckFence(ctx, st); s != Valid || err != nil {
		t.Fatalf("fence: %d %v", s, err)
	}
	if n := wants.Load(); n != 1 {
		t.Errorf("the decision's fences told the heartbeat %d more times, want none", n-1)
	}
	if s, err := m.check(ctx, st); s != Valid || err != nil {
		t.Fatalf("check: %d %v", s, err)
	}
	if n := wants.Load(); n != 1 {
		t.Errorf("a check vouched for by a read less than half its trust old told the heartbeat %d times, want none", n-1)
	}
	clock.Add(int64(trust * 3 / 4))
	if s, err := m.check(ctx, st); s != Valid || err != nil {
		t.Fatalf("check: %d %v", s, err)
	}
	if n := wants.Load(); n != 2 {
		t.Errorf("the next decision's check, its read past half its trust, told the heartbeat %d times, want once", n-1)
	}
}
