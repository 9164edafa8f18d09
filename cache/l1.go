package cache

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/cache/internal/clockmap"
)

// l1 is the optional in-process tier in front of Redis. Entries keep the
// envelope's windows and expire after L1TTL at the latest, never past their
// fresh window. A value handed out from it is shared between callers.
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
	ttl     time.Duration
	m       *clockmap.Map[entry[V]]
	seed    maphash.Seed
	seq     atomic.Uint64 // the version counter
	floors  [l1FloorSlots]atomic.Uint64
	cleared atomic.Uint64 // a floor for every key, raised by clear
	clears  atomic.Int64
}

const l1FloorSlots = 4096

func newL1[V any](size int, ttl time.Duration) *l1[V] {
	return &l1[V]{ttl: ttl, m: clockmap.New[entry[V]](size), seed: maphash.MakeSeed()}
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
	c.m.Update(key, now.UnixNano(), e, exp, func(old clockmap.Trace, live bool) (clockmap.Op, clockmap.Trace) {
		if live && old.Tick > version && (e.digest == 0 || old.Digest != e.digest) {
			raise(floor, c.seq.Add(1))
			return clockmap.Remove, clockmap.Trace{}
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
	}, func(evicted string) { raise(c.floor(evicted), c.seq.Add(1)) })
	return stored
}

// digest identifies an envelope read from Redis, so that two puts can tell
// whether they carry the same one; it is never 0 (0: unknown).
func (c *l1[V]) digest(envelope string) uint64 { return maphash.String(c.seed, envelope) | 1 }

// invalidate drops key and keeps out every put of a read that started
// before this call.
func (c *l1[V]) invalidate(key string) {
	raise(c.floor(key), c.seq.Add(1))
	c.m.Delete(key)
}

// clear drops everything and keeps out every put of a read that started
// before: after missed invalidations nothing can be vouched for.
func (c *l1[V]) clear() {
	raise(&c.cleared, c.seq.Add(1))
	c.m.Clear()
}

// raise sets a to v unless it is already at least v.
func raise(a *atomic.Uint64, v uint64) {
	for {
		cur := a.Load()
		if cur >= v || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

func (c *l1[V]) len() int { return c.m.Len() }

// digestBytes is digest for an envelope being written.
func (c *l1[V]) digestBytes(envelope []byte) uint64 { return maphash.Bytes(c.seed, envelope) | 1 }
