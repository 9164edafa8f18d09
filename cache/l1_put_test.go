package cache

import (
	"reflect"
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
	lc := newL1Case()
	t.Run("older put after newer", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		v0 := c.version() // the old read starts
		v1 := c.version() // the new read starts, both in flight
		if !c.put("k", lc.newer, lc.now, v1) {
			t.Fatal("the first put was refused")
		}
		if c.put("k", lc.older, lc.now, v0) {
			t.Fatal("an older read's put replaced a newer value")
		}
		lc.serves(t, c, "nothing")
		if c.put("k", lc.older, lc.now, v0) {
			t.Fatal("the older put got in on a second try")
		}
	})
	t.Run("newer put after older", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		v0, v1 := c.version(), c.version()
		c.put("k", lc.older, lc.now, v0)
		if c.put("k", lc.newer, lc.now, v1) {
			t.Fatal("a put that cannot be ordered was installed")
		}
		lc.serves(t, c, "nothing")
	})
	t.Run("same envelope", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		v0, v1 := c.version(), c.version()
		c.put("k", lc.newer, lc.now, v0)
		if !c.put("k", lc.newer, lc.now, v1) {
			t.Fatal("two reads of one envelope conflict")
		}
		lc.serves(t, c, "new")
	})
	t.Run("refused newer put leaves a tombstone", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		v0, v1 := c.version(), c.version()
		c.invalidate("k") // an invalidation came while both reads were in flight
		if c.put("k", lc.newer, lc.now, v1) {
			t.Fatal("a put below the floor was installed")
		}
		lc.serves(t, c, "nothing")
		if c.put("k", lc.older, lc.now, v0) {
			t.Fatal("an older read's put got in behind a refused newer one")
		}
	})
	t.Run("a later read replaces", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		c.put("k", lc.older, lc.now, c.version())
		if !c.put("k", lc.newer, lc.now, c.version()) {
			t.Fatal("a read that began after the put could not replace it")
		}
		lc.serves(t, c, "new")
	})
	t.Run("eviction raises the floor", func(t *testing.T) {
		c := newL1[string](1, 0, time.Hour) // one entry per shard
		v0 := c.version()
		c.put("k", lc.newer, lc.now, c.version())
		for i := 0; c.m.Len() > 0 && func() bool { _, ok := c.get("k", lc.now); return ok }(); i++ {
			c.put("x"+string(rune('a'+i%26))+string(rune('a'+i/26)), lc.newer, lc.now, c.version())
		}
		if c.put("k", lc.older, lc.now, v0) {
			t.Fatal("an older read's put took the place of an evicted newer value")
		}
	})
}

// TestShareable pins which value types L1 is on for by default.
func TestShareable(t *testing.T) {
	type inner struct{ A [3]int8 }
	type outer struct {
		S  string
		I  inner
		At time.Time
	}
	type ptr struct{ P *int }
	type iface struct{ V any }
	for _, c := range []struct {
		t    reflect.Type
		want bool
	}{
		{reflect.TypeFor[string](), true}, {reflect.TypeFor[int64](), true}, {reflect.TypeFor[float64](), true},
		{reflect.TypeFor[bool](), true}, {reflect.TypeFor[[4]string](), true}, {reflect.TypeFor[outer](), true},
		{reflect.TypeFor[time.Time](), true}, {reflect.TypeFor[struct{}](), true},
		{reflect.TypeFor[[]byte](), false}, {reflect.TypeFor[map[string]int](), false}, {reflect.TypeFor[*int](), false},
		{reflect.TypeFor[ptr](), false}, {reflect.TypeFor[iface](), false}, {reflect.TypeFor[any](), false},
		{reflect.TypeFor[[2][]int](), false}, {reflect.TypeFor[chan int](), false}, {reflect.TypeFor[func()](), false},
	} {
		if got := shareable(c.t); got != c.want {
			t.Errorf("shareable(%v) = %v, want %v", c.t, got, c.want)
		}
	}
	if l1Size[string](-1) != 0 || l1Size[[]byte](0) != 0 || l1Size[[]byte](7) != 7 || l1Size[string](0) != defaultL1Size {
		t.Error("l1Size does not follow Options.L1Size's doc")
	}
}

// l1Case is two entries of key "k", an older and a newer, both fresh for
// an hour from now: the L1 rules' tests put them in either order.
type l1Case struct {
	now          time.Time
	older, newer entry[string]
}

func newL1Case() l1Case {
	now := time.Now()
	w := stale.Windows{Created: now, FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour), ErrorUntil: now.Add(time.Hour)}
	return l1Case{now: now, older: entry[string]{value: "old", w: w, digest: 11}, newer: entry[string]{value: "new", w: w, digest: 21}}
}

// serves fails t unless c serves want for "k" ("nothing": no entry).
func (lc l1Case) serves(t *testing.T, c *l1[string], want string) {
	t.Helper()
	e, ok := c.get("k", lc.now)
	if got := map[bool]string{true: e.value, false: "nothing"}[ok]; got != want {
		t.Fatalf("L1 serves %s, want %s", got, want)
	}
}
