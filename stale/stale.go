package stale

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidPolicy is returned by [Policy.Validate] for bad values.
var ErrInvalidPolicy = errors.New("stale: invalid policy")

// Policy says how long entries are fresh, stale and kept for errors. The
// zero value has no windows at all; [Policy.Validate] checks a policy. A
// Policy is a value: safe for concurrent use.
type Policy struct {
	// TTL is how long an entry is fresh.
	TTL time.Duration
	// Stale is how long after TTL an entry is served while one caller
	// refreshes it in the background (RFC 5861 stale-while-revalidate).
	Stale time.Duration
	// StaleIfError is how long after TTL an entry is kept to answer when the
	// origin fails (RFC 5861 stale-if-error). It counts from the end of the
	// fresh window, like Stale; a value below Stale adds nothing.
	StaleIfError time.Duration
	// Jitter spreads each write's TTL uniformly over TTL·(1 ± Jitter);
	// in [0, 1). 0 turns it off.
	Jitter float64
	// Beta scales XFetch early refresh; 0 turns it off, 1 is the paper's
	// optimum, above 1 refreshes earlier.
	Beta float64
	// NegativeTTL is how long a "not found" result is cached.
	NegativeTTL time.Duration
}

// Validate reports whether p's values make sense.
func (p Policy) Validate() error {
	switch {
	case p.TTL <= 0:
		return fmt.Errorf("%w: TTL must be positive, got %s", ErrInvalidPolicy, p.TTL)
	case p.Stale < 0:
		return fmt.Errorf("%w: Stale must not be negative, got %s", ErrInvalidPolicy, p.Stale)
	case p.StaleIfError < 0:
		return fmt.Errorf("%w: StaleIfError must not be negative, got %s", ErrInvalidPolicy, p.StaleIfError)
	case p.NegativeTTL < 0:
		return fmt.Errorf("%w: NegativeTTL must not be negative, got %s", ErrInvalidPolicy, p.NegativeTTL)
	case !(p.Jitter >= 0 && p.Jitter < 1): // also rejects NaN
		return fmt.Errorf("%w: Jitter must be in [0, 1), got %v", ErrInvalidPolicy, p.Jitter)
	case !(p.Beta >= 0) || math.IsInf(p.Beta, 1):
		return fmt.Errorf("%w: Beta must be finite and not negative, got %v", ErrInvalidPolicy, p.Beta)
	}
	return nil
}

// With returns p with its windows replaced for one entry: each argument
// that is not negative replaces TTL, Stale and StaleIfError in turn (an
// origin's max-age, stale-while-revalidate and stale-if-error, say). A TTL
// of 0 keeps p's.
func (p Policy) With(ttl, staleFor, staleIfError time.Duration) Policy {
	if ttl > 0 {
		p.TTL = ttl
	}
	if staleFor >= 0 {
		p.Stale = staleFor
	}
	if staleIfError >= 0 {
		p.StaleIfError = staleIfError
	}
	return p
}

// Windows are the ends of an entry's windows.
type Windows struct {
	// Created is when the entry was written.
	Created time.Time
	// FreshUntil ends the fresh window.
	FreshUntil time.Time
	// StaleUntil ends the stale-while-revalidate window (≥ FreshUntil).
	StaleUntil time.Time
	// ErrorUntil ends the stale-if-error window (≥ StaleUntil); the entry is
	// kept until then.
	ErrorUntil time.Time
}

// Rearm returns w fresh again from now for d, as a fail-safe does when the
// origin fails and the entry answers for it: Created is kept (the value is
// as old as it is), and the new fresh window never reaches past the error
// window (the bound the policy set on serving this value for errors).
func (w Windows) Rearm(now time.Time, d time.Duration) Windows {
	w.FreshUntil = now.Add(d)
	if w.ErrorUntil.Before(w.FreshUntil) {
		w.FreshUntil = w.ErrorUntil
	}
	if w.StaleUntil.Before(w.FreshUntil) {
		w.StaleUntil = w.FreshUntil
	}
	return w
}

// Expire returns how long the entry must be kept from Created on.
func (w Windows) Expire() time.Duration { return w.ErrorUntil.Sub(w.Created) }

// Write returns the windows of an entry written at now. ttl overrides
// p.TTL when positive (an origin's max-age, say); u is a uniform draw in
// [0, 1) that places the jittered TTL (u = 0.5 gives the TTL itself).
func (p Policy) Write(now time.Time, ttl time.Duration, u float64) Windows {
	if ttl <= 0 {
		ttl = p.TTL
	}
	if p.Jitter > 0 {
		f := 1 + p.Jitter*(2*clamp01(u)-1)
		ttl = max(time.Duration(float64(ttl)*f), time.Millisecond)
	}
	return p.windows(now, ttl)
}

// WriteNegative returns the windows of a cached "not found" written at now:
// fresh for NegativeTTL, with no stale or error window.
func (p Policy) WriteNegative(now time.Time) Windows {
	end := now.Add(p.NegativeTTL)
	return Windows{Created: now, FreshUntil: end, StaleUntil: end, ErrorUntil: end}
}

func (p Policy) windows(now time.Time, ttl time.Duration) Windows {
	fresh := now.Add(ttl)
	staleUntil := fresh.Add(p.Stale)
	errorUntil := fresh.Add(max(p.Stale, p.StaleIfError))
	return Windows{Created: now, FreshUntil: fresh, StaleUntil: staleUntil, ErrorUntil: errorUntil}
}

// State is an entry's freshness at some moment.
type State uint8

// The states of an entry.
const (
	// Fresh: serve it.
	Fresh State = iota + 1
	// RefreshEarly: serve it, and refresh it in the background now (XFetch).
	RefreshEarly
	// Stale: serve it, and refresh it in the background.
	Stale
	// Expired: recompute it; serve it only if the recompute fails
	// ([Windows.UsableOnError]).
	Expired
	// Gone: past every window.
	Gone
)

var stateNames = [...]string{"unknown", "fresh", "refresh-early", "stale", "expired", "gone"}

// String returns the state's name.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return stateNames[0]
}

// State returns the state of an entry with windows w at now. compute is how
// long the entry's last compute took and u a uniform draw in [0, 1) for
// XFetch; with Beta 0 or no compute time no early refresh happens.
func (p Policy) State(w Windows, now time.Time, compute time.Duration, u float64) State {
	switch {
	case now.Before(w.FreshUntil):
		if p.refreshEarly(w, now, compute, u) {
			return RefreshEarly
		}
		return Fresh
	case now.Before(w.StaleUntil):
		return Stale
	case now.Before(w.ErrorUntil):
		return Expired
	}
	return Gone
}

// UsableOnError reports whether an entry with windows w may answer at now
// when its recompute failed.
func (w Windows) UsableOnError(now time.Time) bool { return now.Before(w.ErrorUntil) }

// refreshEarly is XFetch: now − Δ·β·ln(u') ≥ freshUntil with u' = 1 − u in (0, 1].
func (p Policy) refreshEarly(w Windows, now time.Time, compute time.Duration, u float64) bool {
	if p.Beta <= 0 || compute <= 0 {
		return false
	}
	gap := -float64(compute) * p.Beta * math.Log(1-clamp01(u))
	return float64(w.FreshUntil.Sub(now)) <= gap
}

// EarlyRefreshProbability is the chance that [Policy.State] says
// RefreshEarly for an entry left with remaining fresh time: exp(−remaining/(Δ·β)).
func (p Policy) EarlyRefreshProbability(remaining, compute time.Duration) float64 {
	if p.Beta <= 0 || compute <= 0 {
		return 0
	}
	if remaining <= 0 {
		return 1
	}
	return math.Exp(-float64(remaining) / (float64(compute) * p.Beta))
}

func clamp01(u float64) float64 {
	if !(u >= 0) { // NaN too
		return 0
	}
	return min(u, math.Nextafter(1, 0))
}
