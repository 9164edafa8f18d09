// Package retry holds the pause between attempts that the Redis protocol
// under cache/ takes when a step keeps failing: the notifier's receiver and
// resubscriber, and the background refill of a fill that failed.
package retry

import "time"

// Backoff is the pause after failures failures in a row: 50 ms more per
// failure, at most 1 s.
func Backoff(failures int) time.Duration {
	return min(time.Duration(failures)*50*time.Millisecond, time.Second)
}

// Sleep waits d; it reports false when done closed meanwhile.
func Sleep(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
