package lease

import (
	"testing"
	"time"
)

func TestBackoffIsCappedWithJitter(t *testing.T) {
	base, maxD := 10*time.Millisecond, 200*time.Millisecond
	for attempt := range 64 {
		want := maxD
		if attempt < 5 {
			want = base << attempt
		}
		for range 100 {
			d := backoff(base, maxD, attempt)
			if d < want/2 || d > want {
				t.Fatalf("attempt %d: backoff %s outside [%s, %s]", attempt, d, want/2, want)
			}
		}
	}
}
