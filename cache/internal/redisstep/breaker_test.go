package redisstep

import (
	"testing"
	"time"
)

// Threshold failures in a row open the breaker; while it is open and its
// cooldown lasts no call may use Redis and no probe starts; a success
// closes it.
func TestBreakerOpensAtThresholdAndASuccessClosesIt(t *testing.T) {
	probes := 0
	b := &Breaker{Threshold: 3, Cooldown: time.Hour, Probe: func() { probes++ }}
	for i := range 2 {
		if b.Failure() || b.Open() || !b.Allow() {
			t.Fatalf("failure %d of 3: open=%v allow=%v, want closed", i+1, b.Open(), b.Allow())
		}
	}
	if !b.Failure() || !b.Open() {
		t.Fatal("the third failure in a row did not open the breaker")
	}
	if b.Failure() {
		t.Fatal("a failure of an open breaker reported opening it again")
	}
	if b.Allow() || probes != 0 {
		t.Fatalf("within the cooldown: allow=%v, %d probes; want false, 0", b.Allow(), probes)
	}
	if !b.Success() || b.Open() || !b.Allow() {
		t.Fatalf("after a success: open=%v allow=%v, want closed", b.Open(), b.Allow())
	}
	if b.Success() {
		t.Fatal("a success of a closed breaker reported closing it")
	}
	// A success resets the count: two more failures do not open it.
	b.Failure()
	b.Failure()
	if b.Open() {
		t.Fatal("two failures after a success opened a breaker of threshold 3")
	}
}

// Past the cooldown the first call starts the one probe and is refused;
// the calls after it are refused without another probe until the probe
// failed, and then the next call past the new cooldown probes again.
func TestBreakerProbesOncePerCooldown(t *testing.T) {
	probes := 0
	// A cooldown in the past: every call is past it, whatever the clock.
	b := &Breaker{Threshold: 1, Cooldown: -time.Hour, Probe: func() { probes++ }}
	b.Failure()
	for i := range 3 {
		if b.Allow() {
			t.Fatalf("call %d past the cooldown was allowed before the probe succeeded", i)
		}
	}
	if probes != 1 {
		t.Fatalf("%d probes for three calls, want 1", probes)
	}
	b.ProbeFailed()
	if !b.Open() {
		t.Fatal("a failed probe closed the breaker")
	}
	if b.Allow() || probes != 2 {
		t.Fatalf("after a failed probe: %d probes, want 2", probes)
	}
	if !b.Success() || !b.Allow() {
		t.Fatal("the probe's success did not close the breaker")
	}
}

// Silences less than spacing apart count as one failure: a burst of steps
// that ended together does not open the breaker by their number.
func TestBreakerCountsABurstOfSilencesOnce(t *testing.T) {
	b := &Breaker{Threshold: 2, Cooldown: time.Hour, Probe: func() {}}
	for i := range 5 {
		if b.Silence(time.Hour) || b.Open() {
			t.Fatalf("silence %d within one spacing opened the breaker", i+1)
		}
	}
	if !b.Failure() {
		t.Fatal("the burst of silences counted as no failure at all: one more did not open a breaker of threshold 2")
	}
	b.Success()
	if b.Silence(0) || !b.Silence(0) {
		t.Fatal("with no spacing, two silences did not open a breaker of threshold 2 on the second")
	}
}
