package stale_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/stale"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func TestStateOnAFixedTimeline(t *testing.T) {
	p := stale.Policy{TTL: time.Minute, Stale: 10 * time.Second, StaleIfError: time.Hour}
	w := p.Write(t0, 0, 0.5)
	if !w.FreshUntil.Equal(t0.Add(time.Minute)) || !w.StaleUntil.Equal(t0.Add(70*time.Second)) || !w.ErrorUntil.Equal(t0.Add(61*time.Minute)) {
		t.Fatalf("windows %+v", w)
	}
	cases := []struct {
		at   time.Duration
		want stale.State
	}{
		{0, stale.Fresh},
		{59*time.Second + 999*time.Millisecond, stale.Fresh},
		{time.Minute, stale.Stale}, // the fresh window is half-open
		{69 * time.Second, stale.Stale},
		{70 * time.Second, stale.Expired},
		{61*time.Minute - time.Nanosecond, stale.Expired},
		{61 * time.Minute, stale.Gone},
		{48 * time.Hour, stale.Gone},
	}
	for _, tc := range cases {
		if got := p.State(w, t0.Add(tc.at), 0, 0.5); got != tc.want {
			t.Errorf("at +%s: %s, want %s", tc.at, got, tc.want)
		}
	}
	// stale-if-error window edges.
	for at, usable := range map[time.Duration]bool{
		70 * time.Second:                 true,
		61*time.Minute - time.Nanosecond: true,
		61 * time.Minute:                 false,
	} {
		if got := w.UsableOnError(t0.Add(at)); got != usable {
			t.Errorf("usable on error at +%s: %v", at, got)
		}
	}
}

func TestStaleIfErrorBelowStaleAddsNothing(t *testing.T) {
	p := stale.Policy{TTL: time.Minute, Stale: time.Hour, StaleIfError: time.Second}
	w := p.Write(t0, 0, 0.5)
	if !w.ErrorUntil.Equal(w.StaleUntil) {
		t.Fatalf("%+v", w)
	}
	if w.Expire() != 61*time.Minute {
		t.Fatalf("expire %s", w.Expire())
	}
}

func TestPerEntryTTLOverrides(t *testing.T) {
	p := stale.Policy{TTL: time.Minute, Stale: time.Second}
	w := p.Write(t0, 5*time.Second, 0.5)
	if !w.FreshUntil.Equal(t0.Add(5*time.Second)) || !w.StaleUntil.Equal(t0.Add(6*time.Second)) {
		t.Fatalf("%+v", w)
	}
}

func TestNegativeWindows(t *testing.T) {
	p := stale.Policy{TTL: time.Minute, Stale: time.Hour, NegativeTTL: 3 * time.Second}
	w := p.WriteNegative(t0)
	if got := p.State(w, t0.Add(2*time.Second), 0, 0.5); got != stale.Fresh {
		t.Fatalf("%s", got)
	}
	if got := p.State(w, t0.Add(3*time.Second), 0, 0.5); got != stale.Gone {
		t.Fatalf("a negative entry must not be served stale: %s", got)
	}
}

// Early refresh at the boundary: with u fixed, the decision flips exactly
// where remaining = Δ·β·(−ln(1−u)).
func TestEarlyRefreshBoundary(t *testing.T) {
	p := stale.Policy{TTL: time.Minute, Beta: 1}
	w := p.Write(t0, 0, 0.5)
	compute := time.Second
	u := 1 - math.Exp(-2) // −ln(1−u) = 2: refresh once 2s or less remain
	if got := p.State(w, w.FreshUntil.Add(-2*time.Second-time.Millisecond), compute, u); got != stale.Fresh {
		t.Fatalf("2.001s before expiry: %s", got)
	}
	if got := p.State(w, w.FreshUntil.Add(-2*time.Second+time.Millisecond), compute, u); got != stale.RefreshEarly {
		t.Fatalf("1.999s before expiry: %s", got)
	}
	p.Beta = 0
	if got := p.State(w, w.FreshUntil.Add(-time.Millisecond), compute, 0.999999); got != stale.Fresh {
		t.Fatalf("Beta 0 refreshed early: %s", got)
	}
}

// Statistical XFetch: over many draws the early-refresh rate rises toward
// expiry, matches exp(−remaining/(Δβ)), and is 0 at Beta 0.
func TestXFetchRateRisesTowardExpiry(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const draws = 20000
	compute := 500 * time.Millisecond
	rate := func(p stale.Policy, remaining time.Duration) float64 {
		w := p.Write(t0, 0, 0.5)
		now := w.FreshUntil.Add(-remaining)
		n := 0
		for range draws {
			if p.State(w, now, compute, rng.Float64()) == stale.RefreshEarly {
				n++
			}
		}
		return float64(n) / draws
	}
	p := stale.Policy{TTL: time.Minute, Beta: 1}
	prev := -1.0
	for _, remaining := range []time.Duration{30 * time.Second, 5 * time.Second, 2 * time.Second, time.Second, 250 * time.Millisecond, 10 * time.Millisecond} {
		got := rate(p, remaining)
		want := p.EarlyRefreshProbability(remaining, compute)
		if math.Abs(got-want) > 0.02 {
			t.Errorf("%s before expiry: rate %.4f, want %.4f", remaining, got, want)
		}
		if got < prev {
			t.Errorf("rate fell from %.4f to %.4f nearer expiry", prev, got)
		}
		prev = got
	}
	if prev < 0.9 {
		t.Errorf("10ms before expiry only %.3f refresh early", prev)
	}
	p.Beta = 0
	for _, remaining := range []time.Duration{time.Second, time.Millisecond} {
		if got := rate(p, remaining); got != 0 {
			t.Errorf("Beta 0: rate %.4f at %s", got, remaining)
		}
	}
	// A larger Beta refreshes earlier.
	if lo, hi := rate(stale.Policy{TTL: time.Minute, Beta: 1}, 2*time.Second), rate(stale.Policy{TTL: time.Minute, Beta: 3}, 2*time.Second); hi <= lo {
		t.Errorf("Beta 3 rate %.4f not above Beta 1 rate %.4f", hi, lo)
	}
}

// Jitter: keys written at once get TTLs spread across TTL·(1 ± Jitter).
func TestJitterSpreadsTTLs(t *testing.T) {
	p := stale.Policy{TTL: 100 * time.Second, Jitter: 0.2}
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 10000
	var buckets [10]int
	lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
	for range n {
		ttl := p.Write(t0, 0, rng.Float64()).FreshUntil.Sub(t0)
		if ttl < 80*time.Second || ttl > 120*time.Second {
			t.Fatalf("jittered TTL %s outside [80s, 120s]", ttl)
		}
		lo, hi = min(lo, ttl), max(hi, ttl)
		buckets[min(int((ttl-80*time.Second)/(4*time.Second)), 9)]++
	}
	if lo > 81*time.Second || hi < 119*time.Second {
		t.Fatalf("TTLs span only [%s, %s]", lo, hi)
	}
	for i, b := range buckets {
		if b < n/10*8/10 || b > n/10*12/10 {
			t.Errorf("bucket %d holds %d of %d: not uniform", i, b, n)
		}
	}
	if got := (stale.Policy{TTL: time.Minute}).Write(t0, 0, 0.99).FreshUntil.Sub(t0); got != time.Minute {
		t.Fatalf("no jitter: %s", got)
	}
}

func TestValidate(t *testing.T) {
	bad := []stale.Policy{
		{},
		{TTL: -1},
		{TTL: time.Second, Stale: -1},
		{TTL: time.Second, StaleIfError: -1},
		{TTL: time.Second, NegativeTTL: -1},
		{TTL: time.Second, Jitter: 1},
		{TTL: time.Second, Jitter: -0.1},
		{TTL: time.Second, Jitter: math.NaN()},
		{TTL: time.Second, Beta: -1},
		{TTL: time.Second, Beta: math.Inf(1)},
		{TTL: time.Second, Beta: math.NaN()},
	}
	for _, p := range bad {
		if err := p.Validate(); !errors.Is(err, stale.ErrInvalidPolicy) {
			t.Errorf("%+v: %v", p, err)
		}
	}
	if err := (stale.Policy{TTL: time.Second, Stale: time.Second, StaleIfError: time.Hour, Jitter: 0.5, Beta: 1, NegativeTTL: time.Second}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestStateNames(t *testing.T) {
	for s, want := range map[stale.State]string{stale.Fresh: "fresh", stale.RefreshEarly: "refresh-early", stale.Stale: "stale", stale.Expired: "expired", stale.Gone: "gone", 0: "unknown", 99: "unknown"} {
		if s.String() != want {
			t.Errorf("%d: %q", s, s.String())
		}
	}
}

func TestWithOverridesPerEntry(t *testing.T) {
	p := stale.Policy{TTL: time.Minute, Stale: time.Second, StaleIfError: time.Hour}
	q := p.With(5*time.Second, 2*time.Second, -1)
	if q.TTL != 5*time.Second || q.Stale != 2*time.Second || q.StaleIfError != time.Hour {
		t.Fatalf("%+v", q)
	}
	if r := p.With(0, -1, 0); r.TTL != time.Minute || r.Stale != time.Second || r.StaleIfError != 0 {
		t.Fatalf("%+v", r)
	}
	if p.TTL != time.Minute {
		t.Fatal("With changed the receiver")
	}
}

// A fail-safe re-arm makes an entry fresh again from now for d, keeps its
// Created (the value is as old as it is) and its error window, and never
// lets it stay fresh past that window: the policy's bound on serving the
// value for errors holds however often it is re-armed.
func TestRearmStaysInsideTheErrorWindow(t *testing.T) {
	p := stale.Policy{TTL: time.Minute, Stale: 10 * time.Second, StaleIfError: 10 * time.Minute}
	w := p.Write(t0, 0, 0.5) // fresh to +1m, stale to +1m10s, error to +11m

	now := t0.Add(2 * time.Minute) // expired, inside the error window
	r := w.Rearm(now, time.Second)
	if !r.Created.Equal(w.Created) || !r.ErrorUntil.Equal(w.ErrorUntil) || r.Expire() != w.Expire() {
		t.Fatalf("re-arm moved Created or the error window: %+v from %+v", r, w)
	}
	if !r.FreshUntil.Equal(now.Add(time.Second)) || r.StaleUntil.Before(r.FreshUntil) {
		t.Fatalf("re-armed at +2m for 1s: %+v", r)
	}
	if got := p.State(r, now, 0, 0.5); got != stale.Fresh {
		t.Fatalf("just re-armed: %s, want fresh", got)
	}

	// Re-armed for longer than the error window has left: fresh only to
	// its end, then gone, not usable on error.
	now = w.ErrorUntil.Add(-time.Second)
	r = w.Rearm(now, time.Hour)
	if !r.FreshUntil.Equal(w.ErrorUntil) || !r.StaleUntil.Equal(w.ErrorUntil) || !r.ErrorUntil.Equal(w.ErrorUntil) {
		t.Fatalf("re-armed 1s before the error window ends, for 1h: %+v, want every window to end at %s", r, w.ErrorUntil)
	}
	for _, tc := range []struct {
		at   time.Time
		want stale.State
	}{
		{now, stale.Fresh},
		{w.ErrorUntil.Add(-time.Nanosecond), stale.Fresh},
		{w.ErrorUntil, stale.Gone},
		{now.Add(time.Hour - time.Nanosecond), stale.Gone},
	} {
		if got := p.State(r, tc.at, 0, 0.5); got != tc.want {
			t.Errorf("at %s past the error window's end: %s, want %s", tc.at.Sub(w.ErrorUntil), got, tc.want)
		}
	}
	if r.UsableOnError(w.ErrorUntil) {
		t.Error("a re-armed entry answered for errors past its error window")
	}

	// Re-armed again and again, one throttle at a time: never past it.
	r = w
	for at := t0.Add(2 * time.Minute); at.Before(w.ErrorUntil.Add(time.Minute)); at = at.Add(30 * time.Second) {
		r = r.Rearm(at, time.Minute)
		if r.FreshUntil.After(w.ErrorUntil) || r.StaleUntil.After(w.ErrorUntil) {
			t.Fatalf("re-armed at +%s: %+v reaches past the error window's end %s", at.Sub(t0), r, w.ErrorUntil)
		}
	}
}
