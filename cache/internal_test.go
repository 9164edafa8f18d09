package cache

import (
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache/internal/envelope"
)

// A tag the envelope's decoder accepts is one checkTag accepts: the tag
// alphabet is the namespace's and ':', in both.
func TestTagAlphabetMatchesEnvelope(t *testing.T) {
	for b := range 256 {
		if want := namespaceByte(byte(b)) || b == ':'; envelope.TagByte(byte(b)) != want {
			t.Errorf("byte %q: envelope.TagByte %v, namespace alphabet and ':' %v", byte(b), !want, want)
		}
		tag := string([]byte{byte(b)})
		if (checkTag(tag) == nil) != envelope.ValidTag(tag) {
			t.Errorf("tag %q: checkTag and envelope.ValidTag disagree", tag)
		}
	}
	for _, n := range []int{0, 1, maxTagBytes, maxTagBytes + 1} {
		tag := strings.Repeat("a", n)
		if (checkTag(tag) == nil) != envelope.ValidTag(tag) {
			t.Errorf("a tag of %d bytes: checkTag and envelope.ValidTag disagree", n)
		}
	}
}

func TestPollDelayBounds(t *testing.T) {
	c := &Cache[int]{opts: Options{PollInterval: 160 * time.Millisecond}}
	for attempt := range 40 {
		for range 50 {
			d := c.pollDelay(attempt, 0)
			if d <= 0 || d > 160*time.Millisecond {
				t.Fatalf("attempt %d: %s", attempt, d)
			}
			if d2 := c.pollDelay(attempt, 3*time.Millisecond); d2 > 4*time.Millisecond {
				t.Fatalf("delay %s ignores the holder's remaining 3ms", d2)
			}
		}
	}
}

// waitForConfirmations yields a little so pub/sub confirmations can arrive.
func waitForConfirmations() { time.Sleep(time.Millisecond) }
