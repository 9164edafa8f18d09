package leakcheck

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// WaitBlocked waits until at least n goroutines have a stack frame containing
// frame (e.g. "singleflight.(*Group[...]).Do"), so a test can start the next
// step only once its goroutines are provably parked. It fails the test after
// timeout; a test never passes by timing.
func WaitBlocked(t testing.TB, frame string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := CountFrames(frame)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leakcheck: %d goroutines in %q, want %d", got, frame, n)
		}
		time.Sleep(time.Millisecond) // parking is not observable by event: poll
	}
}

// CountFrames returns the number of goroutines whose stack contains frame.
func CountFrames(frame string) int {
	c := 0
	for _, g := range strings.Split(Stacks(), "\n\n") {
		if strings.Contains(g, frame) {
			c++
		}
	}
	return c
}

// Stacks returns the stacks of every goroutine, separated by blank lines.
func Stacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
