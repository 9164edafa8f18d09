package cache

import (
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache/internal/marks"
)

// The announcement of a write, as L1 applies it (see l1.heard): it drops
// the key and keeps out the puts of older reads, except a put of the very
// envelope it announced, which is the key's value then (a replica's own
// fill, whose announcement may come back before the fill's put); and that
// exception never lets in a read older than anything else that keeps it
// out: this replica's own Delete or Set that returned before a late
// announcement of an older write came, an eviction, a clear, a break, or
// a newer announcement.
func TestL1HearsAWrite(t *testing.T) {
	lc := newL1Case()
	t.Run("drops the value it replaced", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		c.put("k", lc.older, lc.now, c.version())
		c.heard("k", 0, lc.now) // a Delete, or a value too large to carry
		lc.serves(t, c, "nothing")
		v := c.version()
		c.heard("k", lc.newer.digest, lc.now)
		if c.put("k", lc.older, lc.now, v) {
			t.Fatal("an older read's value went in after a newer write was heard")
		}
		lc.serves(t, c, "nothing")
	})
	t.Run("keeps the value it announces", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		c.put("k", lc.newer, lc.now, c.version()) // the writer's own put, first
		c.heard("k", lc.newer.digest, lc.now)
		lc.serves(t, c, "new")
	})
	t.Run("takes the value it announces from an older read", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		v := c.version()                      // the writer's fill is sent
		c.heard("k", lc.newer.digest, lc.now) // its announcement comes back first
		if !c.put("k", lc.newer, lc.now, v) {
			t.Fatal("the writer's own put of the value announced was refused")
		}
		lc.serves(t, c, "new")
	})
	t.Run("not past this replica's own Delete", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		v := c.version()                      // a read begins, and Redis answers it the old value
		c.invalidate("k")                     // this replica's Delete returns
		c.heard("k", lc.older.digest, lc.now) // the old value's announcement, late
		if c.put("k", lc.older, lc.now, v) {
			t.Fatal("a read older than this replica's own Delete put the value back")
		}
		lc.serves(t, c, "nothing")
	})
	t.Run("not past this replica's own Set", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		v := c.version()                                // a read begins, and Redis answers it the old value
		if !c.put("k", lc.newer, lc.now, c.version()) { // this replica's Set returns
			t.Fatal("the Set's put was refused")
		}
		c.heard("k", lc.older.digest, lc.now) // the old value's announcement, late
		if c.put("k", lc.older, lc.now, v) {
			t.Fatal("a read older than this replica's own Set put the value it replaced")
		}
		lc.serves(t, c, "nothing")
	})
	t.Run("not past a clear", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		v := c.version()
		c.heard("k", lc.older.digest, lc.now)
		c.clear()
		c.heard("k", lc.older.digest, lc.now)
		if c.put("k", lc.older, lc.now, v) {
			t.Fatal("a read older than a clear put its value")
		}
	})
	t.Run("not past a later raise of the floor", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		v := c.version()
		c.heard("k", lc.older.digest, lc.now)
		marks.Raise(c.floor("k"), c.seq.Add(1)) // a break, an eviction
		if c.put("k", lc.older, lc.now, v) {
			t.Fatal("a read older than a later floor put its value")
		}
	})
	t.Run("not once a newer write is heard", func(t *testing.T) {
		c := newL1[string](16, 0, time.Hour)
		v := c.version()
		c.heard("k", lc.older.digest, lc.now)
		c.heard("k", lc.newer.digest, lc.now)
		if c.put("k", lc.older, lc.now, v) {
			t.Fatal("the value of an earlier announcement went in after a later one")
		}
		lc.serves(t, c, "nothing")
	})
}
