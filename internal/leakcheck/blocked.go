package leakcheck

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// WaitBlocked waits until at least n goroutines are parked (see [parked])
// with a stack frame containing frame (e.g.
// "singleflight.(*Group[...]).Do("), so a test can start the next step only
// once its goroutines are provably parked. It fails the test after timeout;
// a test never passes by timing.
//
// A goroutine that merely runs through frame is not counted: a caller that
// has entered Do, yet not joined the call in flight (running, or queued on
// its mutex), would let the test's next caller start the call in its place.
func WaitBlocked(t testing.TB, frame string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := countParked(frame)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leakcheck: %d goroutines parked in %q, want %d", got, frame, n)
		}
		time.Sleep(time.Millisecond) // parking is not observable by event: poll
	}
}

// CountParked returns the number of parked goroutines (see [parked]) whose
// stack contains frame: for a test that waits on one of several states.
func CountParked(frame string) int { return countParked(frame) }

// countParked returns the number of parked goroutines whose stack contains
// frame.
func countParked(frame string) int {
	c := 0
	for _, g := range strings.Split(Stacks(), "\n\n") {
		if strings.Contains(g, frame) && parked(g) {
			c++
		}
	}
	return c
}

// parked reports whether the goroutine whose stack is g waits for an
// event (a channel, a select, a condition, a timer, I/O): not running or
// ready to, in a system call, nor queued on a mutex, which every goroutine
// passes through on its way.
func parked(g string) bool {
	header, _, _ := strings.Cut(g, "\n") // goroutine 7 [select, 2 minutes]:
	_, state, ok := strings.Cut(header, "[")
	if !ok {
		return false
	}
	state, _, _ = strings.Cut(state, "]")
	state, _, _ = strings.Cut(state, ",")
	switch {
	case state == "running", state == "runnable", state == "syscall", state == "preempted",
		strings.HasPrefix(state, "sync.Mutex."), strings.HasPrefix(state, "sync.RWMutex."):
		return false
	}
	return true
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
