package cache

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/stale"
)

// plainHit, the hit path's first question, says yes only where judgeAt
// says verdictHit: for a plain entry, and for none that is kept,
// fail-safe, tagged, invalidated (hard or soft), no longer fresh, within
// XFetch's reach, or judged on a clock other than the real one.
func TestPlainHitOnlyWhereJudgeSaysHit(t *testing.T) {
	c, err := New[string](redistest.Client(t), Options{Namespace: redistest.Prefix(t), TTL: time.Hour, Beta: 1,
		InvalidationWait: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()
	entryOf := func(gen uint64, fresh time.Duration) entry[string] {
		return entry[string]{value: "v", took: 50 * time.Millisecond, stamp: marks.Stamp{Gen: gen},
			w: stale.Windows{Created: now.Add(-time.Second), FreshUntil: now.Add(fresh), StaleUntil: now.Add(time.Hour), ErrorUntil: now.Add(time.Hour)}}
	}
	plain := entryOf(300, time.Hour)
	if v, err := c.judgeAt(ctx, &plain, true, now, now); v != verdictHit || err != nil { // reads the namespace's mark: vouched for an hour
		t.Fatalf("plain entry: verdict %v, %v", v, err)
	}
	c.marks.RaiseAll(nil, 100, false) // the namespace hard-invalidated below generation 100
	c.marks.RaiseAll(nil, 200, true)  // and soft below 200
	kept, failSafe, tagged := entryOf(300, time.Hour), entryOf(300, time.Hour), entryOf(300, time.Hour)
	kept.kept, failSafe.failSafe, tagged.stamp.Tags = true, true, []string{"t"}
	cases := []struct {
		name string
		e    entry[string]
		real bool
		want bool
	}{
		{"plain", plain, true, true},
		{"fake clock", plain, false, false},
		{"hard-invalidated", entryOf(50, time.Hour), true, false},
		{"soft-invalidated", entryOf(150, time.Hour), true, false},
		{"kept", kept, true, false},
		{"fail-safe", failSafe, true, false},
		{"tagged", tagged, true, false},
		{"stale", entryOf(300, -time.Second), true, false},
		{"within XFetch's reach", entryOf(300, time.Millisecond), true, false},
	}
	for _, tc := range cases {
		c.realClock = tc.real
		got := c.plainHit(&tc.e, now)
		v, _ := c.judgeAt(ctx, &tc.e, true, now, now)
		c.realClock = true
		if got != tc.want {
			t.Errorf("%s: plainHit %v, want %v", tc.name, got, tc.want)
		}
		if got && v != verdictHit {
			t.Errorf("%s: plainHit, but judgeAt says %v", tc.name, v)
		}
	}
}
