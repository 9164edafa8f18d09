package retry

import (
	"testing"
	"time"
)

// The pause grows by 50 ms a failure and stops at 1 s.
func TestBackoffGrowsLinearlyToOneSecond(t *testing.T) {
	for failures, want := range map[int]time.Duration{
		0: 0, 1: 50 * time.Millisecond, 2: 100 * time.Millisecond,
		19: 950 * time.Millisecond, 20: time.Second, 1000: time.Second,
	} {
		if got := Backoff(failures); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", failures, got, want)
		}
	}
}

// A pause ends early, reporting false, once done is closed.
func TestSleepEndsWhenDoneCloses(t *testing.T) {
	done := make(chan struct{})
	close(done)
	if Sleep(done, time.Hour) {
		t.Fatal("Sleep reported a full pause although done was closed")
	}
	if !Sleep(make(chan struct{}), 0) {
		t.Fatal("a zero pause with done open reported false")
	}
}
