package lease

import (
	"context"
	"testing"
	"time"
)

// stubBackend is a backend with no drift allowance, for the validity
// bookkeeping alone.
type stubBackend struct{ Options }

func (*stubBackend) release(context.Context, *Lease) error               { panic("not used") }
func (*stubBackend) extend(context.Context, *Lease, time.Duration) error { panic("not used") }
func (b *stubBackend) options() *Options                                 { return &b.Options }
func (*stubBackend) drift(time.Duration) time.Duration                   { return 0 }
func (*stubBackend) now() time.Time                                      { panic("not used") }

// Until after extensions sent and answered in every order that matters:
// an extension alone sets it, later or earlier; a shorter one holds it
// down from when it is sent, answered or not; of overlapping ones, the
// earliest deadline stands, since Redis may have taken any of them last
// (two longer ones included: the second's answer must not move Until past
// the first's deadline, nor may they leave it at the deadline from before
// them, which would cut the work short while Redis holds the lease).
func TestUntilAfterOverlappingExtensions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	sec := func(s int) time.Duration { return time.Duration(s) * time.Second }
	fresh := func() *Lease { return newLease(&stubBackend{}, "n", "tok", 1, sec(5), t0) } // until t0+5
	want := func(t *testing.T, l *Lease, s int, when string) {
		t.Helper()
		if got := l.Until(); !got.Equal(at(s)) {
			t.Errorf("%s: Until t0+%s, want t0+%ds", when, got.Sub(t0), s)
		}
	}

	t.Run("alone, longer", func(t *testing.T) {
		l := fresh()
		e := l.extending(at(1), sec(10))
		want(t, l, 5, "while out")
		l.extended(e, true)
		want(t, l, 11, "answered")
	})
	t.Run("alone, shorter", func(t *testing.T) {
		l := fresh()
		e := l.extending(at(1), sec(1))
		want(t, l, 2, "while out")
		l.extended(e, true)
		want(t, l, 2, "answered")
	})
	t.Run("alone, shorter, failed", func(t *testing.T) {
		l := fresh()
		l.extended(l.extending(at(1), sec(1)), false)
		want(t, l, 2, "failed (Redis may have taken it)")
	})
	t.Run("overlapping, both longer", func(t *testing.T) {
		for _, firstAnswered := range []bool{true, false} {
			l := fresh()
			e1 := l.extending(at(1), sec(10))
			e2 := l.extending(at(2), sec(10))
			if firstAnswered {
				l.extended(e1, true)
				l.extended(e2, true)
			} else {
				l.extended(e2, true)
				l.extended(e1, true)
			}
			want(t, l, 11, "both answered")
		}
	})
	t.Run("overlapping, a shorter one of the caller's", func(t *testing.T) {
		for _, firstAnswered := range []bool{true, false} {
			l := fresh()
			keep := l.extending(at(1), sec(10))
			short := l.extending(at(2), sec(1))
			want(t, l, 3, "while out")
			if firstAnswered {
				l.extended(keep, true)
				want(t, l, 3, "the longer answered first")
				l.extended(short, true)
			} else {
				l.extended(short, true)
				l.extended(keep, true)
			}
			want(t, l, 3, "both answered")
		}
	})
	t.Run("a later extension alone moves it on again", func(t *testing.T) {
		l := fresh()
		keep := l.extending(at(1), sec(10))
		short := l.extending(at(2), sec(1))
		l.extended(keep, true)
		l.extended(short, true)
		l.extended(l.extending(at(3), sec(10)), true)
		want(t, l, 13, "answered")
	})
}
