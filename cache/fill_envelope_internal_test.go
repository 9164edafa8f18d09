package cache

import (
	"testing"
	"time"

	"github.com/stampede-go/stampede/stale"
)

// redisstore.FillMany skips a Fill whose Envelope is nil (nothing to
// store, its claim already abandoned): an entry that encodes must
// therefore never encode to nil, or its fill would be skipped silently,
// reported neither stored, fenced nor failed, and its lease left to
// expire. Empty values, negative entries and empty raws included.
func TestEncodedEntryIsNeverNil(t *testing.T) {
	c, err := New[string](nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	now := time.Now()
	w := stale.Windows{Created: now, FreshUntil: now, StaleUntil: now, ErrorUntil: now}
	for name, e := range map[string]entry[string]{
		"empty value": {w: w},
		"negative":    {w: w, negative: true},
		"fail-safe":   {w: w, failSafe: true},
	} {
		b, err := c.encodeEntryRaw(e, "")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(b) == 0 {
			t.Fatalf("%s encodes to %v: its fill would be skipped", name, b)
		}
	}
}
