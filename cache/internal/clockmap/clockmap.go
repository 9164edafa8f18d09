// Package clockmap is the bounded map under cache's L1 tier and its
// process-local store: sharded, an expiry per entry, CLOCK (second-chance)
// eviction, and reads that take no lock.
//
// It knows nothing of what it holds: a value of any type T, with the
// trace a put leaves (the tick it was put at and a digest of what it
// holds), which [Map.Update] shows to its caller under the key's lock so
// that a caller's rules for a put (L1's versions and floors) are decided
// where no other put of the key can come between.
package clockmap

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// Map is a bounded, sharded map of values with an expiry each and CLOCK
// eviction. Safe for concurrent use. A read takes no lock: a hot key's
// readers on several cores would otherwise contend on its shard's lock
// word (a read lock is a write to it); writers serialise per shard, and an
// entry, once published, is never modified (a write of an existing key
// publishes a new one), except for its CLOCK bit.
type Map[T any] struct {
	seed   maphash.Seed
	shards [shards]shard[T]
}

const shards = 16

type shard[T any] struct {
	mu    sync.Mutex  // writers
	m     sync.Map    // string -> *entry[T]; read without mu, written with it
	n     int         // entries in m
	ring  []*entry[T] // CLOCK ring, grown up to limit; nil slots are free
	hand  int
	limit int
	// cost is the sum of the entries' costs; maxCost bounds it (0: no
	// bound).
	cost, maxCost int64
}

type entry[T any] struct {
	key     string
	v       T
	expires int64 // unix nanoseconds
	trace   Trace
	cost    int64 // what the entry weighs against the bound (see NewWeighted)
	// tombstone: not a value, only a trace (see PutTombstone).
	tombstone bool
	slot      int // in ring; read and written with the shard's mu
	used      atomic.Bool
}

// Trace is what a put leaves beside its value (or tombstone) for the next
// [Map.Update] of its key to see: the tick it was put at, on the caller's
// clock, and a digest of what it holds (0: unknown). [Map.Put] leaves the
// zero Trace.
type Trace struct {
	Tick   uint64
	Digest uint64
	// Announced: a tombstone left by the announcement of a write of the
	// value Digest names (the cache's L1 takes a put of that value then,
	// from a read that began at Floor or later).
	Announced bool
	Floor     uint64
}

// Op is what an [Map.Update]'s decide asks for.
type Op int

const (
	// Skip leaves the key as it is.
	Skip Op = iota
	// Remove drops the key's entry or tombstone.
	Remove
	// Store stores the value.
	Store
	// StoreTombstone stores a tombstone: [Map.Get] does not see it, the
	// next [Map.Update] of the key sees its trace until it expires.
	StoreTombstone
)

// New returns a Map holding at most about size entries (at least one per
// shard).
func New[T any](size int) *Map[T] {
	return NewWeighted[T](size, 0)
}

// NewWeighted is [New] with a second bound: the costs the puts give their
// entries (their size in bytes, say) add up to at most about maxCost (0: no
// such bound). An entry that alone weighs more than a shard's share of
// maxCost (maxCost/16) is not stored; its key's old entry is dropped.
func NewWeighted[T any](size int, maxCost int64) *Map[T] {
	c := &Map[T]{seed: maphash.MakeSeed()}
	per := max(size/shards, 1)
	perCost := int64(0)
	if maxCost > 0 {
		perCost = max(maxCost/shards, 1)
	}
	for i := range c.shards {
		// The ring grows as entries come, up to the bound: a large bound
		// costs nothing (not even GC scanning) until it is used.
		c.shards[i].limit = per
		c.shards[i].maxCost = perCost
	}
	return c
}

func (c *Map[T]) shard(key string) *shard[T] {
	return &c.shards[maphash.String(c.seed, key)%shards]
}

// load returns key's published entry.
func (s *shard[T]) load(key string) (*entry[T], bool) {
	v, ok := s.m.Load(key)
	if !ok {
		return nil, false
	}
	return v.(*entry[T]), true
}

// Get returns key's value while now (unix nanoseconds) is before its
// expiry.
func (c *Map[T]) Get(key string, now int64) (T, bool) {
	ce, ok := c.shard(key).load(key)
	if !ok || ce.tombstone || now >= ce.expires {
		var zero T
		return zero, false
	}
	if !ce.used.Load() {
		ce.used.Store(true)
	}
	return ce.v, true
}

// storeLocked stores v (or a tombstone) weighing cost until expires in s,
// evicting by CLOCK while s is over either bound, and calls evicted (when
// not nil) with each key it evicted. An entry over the shard's cost bound
// on its own is not stored: key's old entry is dropped instead. Call with
// s.mu held.
func (s *shard[T]) storeLocked(key string, v T, cost, expires int64, t Trace, tombstone bool, evicted func(string)) {
	if s.maxCost > 0 && cost > s.maxCost {
		s.deleteLocked(key)
		return
	}
	ce := &entry[T]{key: key, v: v, expires: expires, trace: t, cost: cost, tombstone: tombstone}
	if old, ok := s.load(key); ok { // a new entry in its place: readers hold the old one
		ce.slot = old.slot
		ce.used.Store(true)
		s.ring[ce.slot] = ce
		s.m.Store(key, ce)
		s.cost += cost - old.cost
		s.shed(ce, evicted)
		return
	}
	s.cost += cost
	if len(s.ring) < s.limit {
		ce.slot = len(s.ring)
		s.ring = append(s.ring, ce)
		s.m.Store(key, ce)
		s.n++
		s.shed(ce, evicted)
		return
	}
	s.evictLocked(nil, evicted) // the ring is full: free a slot
	ce.slot = s.hand
	s.ring[s.hand] = ce
	s.m.Store(key, ce)
	s.n++
	s.hand = (s.hand + 1) % s.limit
	s.shed(ce, evicted)
}

// shed evicts by CLOCK, sparing keep, while s is over its cost bound.
// keep alone is within it (storeLocked checked), so this ends.
func (s *shard[T]) shed(keep *entry[T], evicted func(string)) {
	for s.maxCost > 0 && s.cost > s.maxCost {
		s.evictLocked(keep, evicted)
	}
}

// evictLocked moves the CLOCK hand to a slot that is free or whose entry
// (never keep) was not used since the hand last passed, empties it and
// leaves the hand on it.
func (s *shard[T]) evictLocked(keep *entry[T], evicted func(string)) {
	for {
		victim := s.ring[s.hand]
		if victim == nil && keep == nil {
			return
		}
		if victim != nil && victim != keep && !victim.used.Swap(false) {
			s.m.Delete(victim.key)
			s.n--
			s.cost -= victim.cost
			s.ring[s.hand] = nil
			if evicted != nil {
				evicted(victim.key)
			}
			return
		}
		s.hand = (s.hand + 1) % len(s.ring)
	}
}

// Put stores v until expires (unix nanoseconds), weighing nothing.
func (c *Map[T]) Put(key string, v T, expires int64) {
	c.PutWeighted(key, v, 0, expires)
}

// PutWeighted stores v weighing cost (see [NewWeighted]) until expires
// (unix nanoseconds), evicting by CLOCK to make room, and reports whether
// it was stored: an entry that does not [Map.Fits] is not, and key's old
// entry is dropped instead.
func (c *Map[T]) PutWeighted(key string, v T, cost, expires int64) bool {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.storeLocked(key, v, cost, expires, Trace{}, false, nil)
	return s.maxCost == 0 || cost <= s.maxCost
}

// Fits reports whether an entry weighing cost can be stored: it is within
// a shard's share of the cost bound (maxCost/16; any cost when there is no
// such bound).
func (c *Map[T]) Fits(cost int64) bool {
	m := c.shards[0].maxCost // the same in every shard
	return m == 0 || cost <= m
}

// Cost is the sum of the costs of the entries held, expired or not.
func (c *Map[T]) Cost() int64 {
	var n int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.cost
		s.mu.Unlock()
	}
	return n
}

// Update is a put decided under key's lock. It calls decide with the trace
// of key's entry or tombstone while now (unix nanoseconds) is before its
// expiry (live false: none), and does what decide returns: for Store and
// StoreTombstone it stores v, weighing cost (see [NewWeighted]; a
// tombstone weighs nothing), until expires with the returned trace, and
// calls evicted with each key it evicted to make room. decide and evicted
// run with the key's shard locked: no other write to that shard comes
// between them and the store, and they must not call back into c.
func (c *Map[T]) Update(key string, now int64, v T, cost, expires int64,
	decide func(old Trace, live bool) (Op, Trace), evicted func(key string)) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	var old Trace
	ce, live := s.load(key)
	if live && now < ce.expires {
		old = ce.trace
	} else {
		live = false
	}
	op, t := decide(old, live)
	switch op {
	case Remove:
		s.deleteLocked(key)
	case Store:
		s.storeLocked(key, v, cost, expires, t, false, evicted)
	case StoreTombstone:
		s.storeLocked(key, v, 0, expires, t, true, evicted)
	}
}

// deleteLocked removes key from s; call with s.mu held.
func (s *shard[T]) deleteLocked(key string) {
	if ce, ok := s.load(key); ok {
		s.m.Delete(key)
		s.n--
		s.cost -= ce.cost
		s.ring[ce.slot] = nil
	}
}

// Delete drops key.
func (c *Map[T]) Delete(key string) {
	s := c.shard(key)
	s.mu.Lock()
	s.deleteLocked(key)
	s.mu.Unlock()
}

// Clear drops everything.
func (c *Map[T]) Clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.m.Clear()
		s.n = 0
		s.cost = 0
		clear(s.ring)
		s.mu.Unlock()
	}
}

// Sweep drops the entries (and tombstones) expired at now (unix
// nanoseconds).
func (c *Map[T]) Sweep(now int64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.m.Range(func(key, v any) bool {
			if now >= v.(*entry[T]).expires {
				s.deleteLocked(key.(string))
			}
			return true
		})
		s.mu.Unlock()
	}
}

// Len is the number of entries and tombstones held, expired or not.
func (c *Map[T]) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.n
		s.mu.Unlock()
	}
	return n
}
