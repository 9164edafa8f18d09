package cache

import (
	"hash/maphash"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/cache/internal/clockmap"
	"github.com/stampede-go/stampede/cache/internal/marks"
)

// l1 is the in-process tier in front of Redis (see Options.L1Size for when
// it is on). Entries keep the envelope's windows and expire after L1TTL at
// the latest, never past their fresh window. A value handed out from it is
// shared between callers.
//
// Versions keep an invalidated value out: every put carries the version
// that [l1.version] gave before the read that produced the entry started,
// and an invalidation (a Set, Delete or fill here or on another replica)
// raises its key's floor past every version handed out so far. A put below
// its key's floor (a read that raced a write) is dropped. Announcements only
// invalidate: they never install a value, so an old announcement arriving
// late cannot replace a newer one. Floors are kept per slot of a fixed table (a key shares its
// slot with others: a put is at worst dropped needlessly), so they cost no
// memory per key.
type l1[V any] struct {
	size    int // the bound on entries
	ttl     time.Duration
	m       *clockmap.Map[entry[V]]
	seed    maphash.Seed
	seq     atomic.Uint64 // the version counter
	floors  [l1FloorSlots]atomic.Uint64
	cleared atomic.Uint64 // a floor for every key, raised by clear
	clears  atomic.Int64
}

const l1FloorSlots = 4096

// defaultL1Size is L1's size when Options.L1Size is 0 and V is shareable.
const defaultL1Size = 10_000

// l1Size is how many entries L1 holds for option (see Options.L1Size): 0
// when it is off.
func l1Size[V any](option int) int {
	switch {
	case option > 0:
		return option
	case option == 0 && shareable(reflect.TypeFor[V]()):
		return defaultL1Size
	}
	return 0
}

// shareable reports whether a value of type t can be handed to several
// callers with none able to change what another holds: nothing in it
// refers to memory (no pointer, slice, map, channel, func or interface; a
// string's bytes cannot be written). A time.Time is shareable: its pointer
// is to a Location, which nothing changes.
func shareable(t reflect.Type) bool {
	if t == reflect.TypeFor[time.Time]() {
		return true
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String:
		return true
	case reflect.Array:
		return shareable(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !shareable(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

// l1EntryOverhead is what an entry weighs against L1MaxBytes beyond its
// key and its envelope's bytes: the map's and the entry's own words.
const l1EntryOverhead = 128

// newL1 holds up to size entries weighing up to maxBytes (each its key,
// its stored envelope's length and l1EntryOverhead: about what it holds in
// memory for a string or []byte value) for at most ttl.
func newL1[V any](size int, maxBytes int64, ttl time.Duration) *l1[V] {
	return &l1[V]{size: size, ttl: ttl, m: clockmap.NewWeighted[entry[V]](size, maxBytes), seed: maphash.MakeSeed()}
}

func (c *l1[V]) floor(key string) *atomic.Uint64 {
	return &c.floors[maphash.String(c.seed, key)%l1FloorSlots]
}

// version is the version to give a put of an entry read from now on.
func (c *l1[V]) version() uint64 { return c.seq.Load() }

// get returns key's entry while it is inside its L1 lifetime.
func (c *l1[V]) get(key string, now time.Time) (entry[V], bool) {
	return c.m.Get(key, now.UnixNano())
}

// put stores a fresh entry read at version until min(now + ttl, its
// fresh-until), unless an invalidation of key came since version. It
// reports whether e was stored.
//
// Two reads of key in flight at once may return different values (a fill
// happened between them, and its announcement is not here yet), and their
// puts may come in either order: the later put cannot tell which value is
// newer, and the reader of the newer one may already have answered its
// caller. So every put leaves a trace: the entry, or, when the floor
// refuses it, a tombstone with its digest. A put that finds a live entry or
// tombstone left after its own read started (both carry the tick of their
// put) with another digest (another envelope, or one of unknown origin)
// installs nothing: it drops the key and raises its floor, and the next
// read goes to Redis. A put that finds a trace left before its read started
// replaces it: its read began after that one's ended, so it saw the same
// value or a newer one. An eviction raises the evicted key's floor, so that
// a put of an older read cannot take the place of a newer value evicted.
func (c *l1[V]) put(key string, e entry[V], now time.Time, version uint64) bool {
	exp := min(now.Add(c.ttl).UnixNano(), e.w.FreshUntil.UnixNano())
	if exp <= now.UnixNano() {
		return false
	}
	floor := c.floor(key)
	stored := false
	cost := int64(len(key) + e.size + l1EntryOverhead)
	c.m.Update(key, now.UnixNano(), e, cost, exp, func(old clockmap.Trace, live bool) (clockmap.Op, clockmap.Trace) {
		if live && old.Tick > version && (e.digest == 0 || old.Digest != e.digest) {
			marks.Raise(floor, c.seq.Add(1))
			return clockmap.Remove, clockmap.Trace{}
		}
		if live && old.Announced && e.digest != 0 && old.Digest == e.digest &&
			version >= old.Floor && floor.Load() <= old.Tick && version >= c.cleared.Load() {
			// The value announced last for key (see heard), from a read
			// that the announcement alone would refuse.
			stored = true
			return clockmap.Store, clockmap.Trace{Tick: c.seq.Add(1), Digest: e.digest}
		}
		// Decided under the key's lock: invalidate raises the floor before
		// it takes the lock to delete, so a put either sees the floor or is
		// deleted.
		refused := version < floor.Load() || version < c.cleared.Load()
		if refused && live && old.Tick > version {
			return clockmap.Skip, clockmap.Trace{} // a concurrent read of the same envelope left its trace
		}
		t := clockmap.Trace{Tick: c.seq.Add(1), Digest: e.digest}
		if refused {
			return clockmap.StoreTombstone, t
		}
		stored = true
		return clockmap.Store, t
	}, func(evicted string) { marks.Raise(c.floor(evicted), c.seq.Add(1)) })
	return stored
}

// digest identifies an envelope read from Redis, so that two puts can tell
// whether they carry the same one; it is never 0 (0: unknown).
func (c *l1[V]) digest(envelope string) uint64 { return maphash.String(c.seed, envelope) | 1 }

// invalidate drops key and keeps out every put of a read that started
// before this call.
func (c *l1[V]) invalidate(key string) {
	marks.Raise(c.floor(key), c.seq.Add(1))
	c.m.Delete(key)
}

// heard applies an announcement of a write of key: it keeps out every put
// of a read that started before this call, except a put of the very
// envelope announced (digest keep, 0 when the announcement does not carry
// it), which is the key's value as of the announcement; and it drops key
// unless L1 holds that envelope. A replica's own write is heard too, and
// its put may come before or after.
//
// The exception lives in a tombstone marked Announced: whatever comes
// after the announcement for key (another announcement, an invalidation,
// an eviction, a put refused) replaces or removes it. It holds only for a
// read that began after every other reason to refuse it: at or past the
// floor as it stood before this announcement raised it (a Delete of this
// replica's own that returned before the announcement came, say, raised
// it, and a read older than that Delete must not put the value back), and
// after the trace the tombstone replaces was left (this replica's own Set,
// put before a late announcement of an older write came).
func (c *l1[V]) heard(key string, keep uint64, now time.Time) {
	floor := c.floor(key)
	raised := c.seq.Add(1)
	before := marks.Raise(floor, raised)
	exp := now.Add(c.ttl).UnixNano()
	c.m.Update(key, now.UnixNano(), entry[V]{}, 0, exp, func(old clockmap.Trace, live bool) (clockmap.Op, clockmap.Trace) {
		switch {
		case live && keep != 0 && old.Digest == keep:
			return clockmap.Skip, clockmap.Trace{}
		case keep != 0:
			// Tick: the floor this announcement raised; a put finds the
			// floor past it once anything else raised it since. Floor:
			// no read older than the trace replaced (this replica's own
			// Set, put before a late announcement of an older write) or
			// than the floor's raises before this one.
			if live {
				before = max(before, old.Tick)
			}
			return clockmap.StoreTombstone, clockmap.Trace{Tick: raised, Digest: keep, Announced: true, Floor: before}
		}
		return clockmap.Remove, clockmap.Trace{}
	}, nil)
}

// clear drops everything and keeps out every put of a read that started
// before: after missed invalidations nothing can be vouched for.
func (c *l1[V]) clear() {
	marks.Raise(&c.cleared, c.seq.Add(1))
	c.m.Clear()
}

func (c *l1[V]) len() int { return c.m.Len() }

// digestBytes is digest for an envelope being written.
func (c *l1[V]) digestBytes(envelope []byte) uint64 { return maphash.Bytes(c.seed, envelope) | 1 }
