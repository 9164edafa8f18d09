package cache

import (
	"testing"
	"time"

	"github.com/stampede-go/stampede/stale"
)

// The L1 put rules, one step at a time (see l1.put): two reads in flight at
// once that saw different envelopes install neither, whatever the order of
// their puts, even when the newer one's put was refused by the floor; a
// read that began after an entry was put replaces it; an eviction keeps an
// older read's put out.
func TestL1PutOrdering(t *testing.T) {
	now := time.Now()
	w := stale.Windows{Created: now, FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour), ErrorUntil: now.Add(time.Hour)}
	older := entry[string]{value: "old", w: w, digest: 11}
	newer := entry[string]{value: "new", w: w, digest: 21}
	serves := func(c *l1[string], want string) {
		t.Helper()
		e, ok := c.get("k", now)
		if got := map[bool]string{true: e.value, false: "nothing"}[ok]; got != want {
			t.Fatalf("L1 serves %s, want %s", got, want)
		}
	}
	t.Run("older put after newer", func(t *testing.T) {
		c := newL1[string](16, time.Hour)
		v0 := c.version() // the old read starts
		v1 := c.version() // the new read starts, both in flight
		if !c.put("k", newer, now, v1) {
			t.Fatal("the first put was refused")
		}
		if c.put("k", older, now, v0) {
			t.Fatal("an older read's put replaced a newer value")
		}
		serves(c, "nothing")
		if c.put("k", older, now, v0) {
			t.Fatal("the older put got in on a second try")
		}
	})
	t.Run("newer put after older", func(t *testing.T) {
		c := newL1[string](16, time.Hour)
		v0, v1 := c.version(), c.version()
		c.put("k", older, now, v0)
		if c.put("k", newer, now, v1) {
			t.Fatal("a put that cannot be ordered was installed")
		}
		serves(c, "nothing")
	})
	t.Run("same envelope", func(t *testing.T) {
		c := newL1[string](16, time.Hour)
		v0, v1 := c.version(), c.version()
		c.put("k", newer, now, v0)
		if !c.put("k", newer, now, v1) {
			t.Fatal("two reads of one envelope conflict")
		}
		serves(c, "new")
	})
	t.Run("refused newer put leaves a tombstone", func(t *testing.T) {
		c := newL1[string](16, time.Hour)
		v0, v1 := c.version(), c.version()
		c.invalidate("k") // an invalidation came while both reads were in flight
		if c.put("k", newer, now, v1) {
			t.Fatal("a put below the floor was installed")
		}
		serves(c, "nothing")
		if c.put("k", older, now, v0) {
			t.Fatal("an older read's put got in behind a refused newer one")
		}
	})
	t.Run("a later read replaces", func(t *testing.T) {
		c := newL1[string](16, time.Hour)
		c.put("k", older, now, c.version())
		if !c.put("k", newer, now, c.version()) {
			t.Fatal("a read that began after the put could not replace it")
		}
		serves(c, "new")
	})
	t.Run("eviction raises the floor", func(t *testing.T) {
		c := newL1[string](1, time.Hour) // one entry per shard
		v0 := c.version()
		c.put("k", newer, now, c.version())
		for i := 0; c.m.Len() > 0 && func() bool { _, ok := c.get("k", now); return ok }(); i++ {
			c.put("x"+string(rune('a'+i%26))+string(rune('a'+i/26)), newer, now, c.version())
		}
		if c.put("k", older, now, v0) {
			t.Fatal("an older read's put took the place of an evicted newer value")
		}
	})
}
