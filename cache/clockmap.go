package cache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// clockMap is a bounded, sharded map of entries with an expiry each and
// CLOCK (second-chance) eviction. The L1 tier and the process-local store
// are both built on it. Safe for concurrent use. A read takes no lock: a
// hot key's readers on several cores would otherwise contend on its
// shard's lock word (a read lock is a write to it); writers serialise per
// shard, and an entry, once published, is never modified (a write of an
// existing key publishes a new one), except for its CLOCK bit.
type clockMap[V any] struct {
	seed   maphash.Seed
	shards [clockShards]clockShard[V]
}

const clockShards = 16

type clockShard[V any] struct {
	mu    sync.Mutex       // writers
	m     sync.Map         // string -> *clockEntry[V]; read without mu, written with it
	n     int              // entries in m
	ring  []*clockEntry[V] // CLOCK ring, grown up to limit; nil slots are free
	hand  int
	limit int
}

type clockEntry[V any] struct {
	key     string
	e       entry[V]
	expires int64 // unix nanoseconds
	// tick is when the entry was put, on the L1 version counter (0 in
	// the process-local store).
	tick uint64
	// tombstone: not a value, only what an L1 put refused (see l1.put).
	tombstone bool
	slot      int // in ring; read and written with the shard's mu
	used      atomic.Bool
}

func newClockMap[V any](size int) *clockMap[V] {
	c := &clockMap[V]{seed: maphash.MakeSeed()}
	per := max(size/clockShards, 1)
	for i := range c.shards {
		// The ring grows as entries come, up to the bound: a large bound
		// costs nothing (not even GC scanning) until it is used.
		c.shards[i].limit = per
	}
	return c
}

func (c *clockMap[V]) shard(key string) *clockShard[V] {
	return &c.shards[maphash.String(c.seed, key)%clockShards]
}

// load returns key's published entry.
func (s *clockShard[V]) load(key string) (*clockEntry[V], bool) {
	v, ok := s.m.Load(key)
	if !ok {
		return nil, false
	}
	return v.(*clockEntry[V]), true
}

// get returns key's entry while now (unix nanoseconds) is before its expiry.
func (c *clockMap[V]) get(key string, now int64) (entry[V], bool) {
	ce, ok := c.shard(key).load(key)
	if !ok || ce.tombstone || now >= ce.expires {
		return entry[V]{}, false
	}
	if !ce.used.Load() {
		ce.used.Store(true)
	}
	return ce.e, true
}

// putLocked stores e until expires in s, put at tick, evicting by CLOCK
// when s is full; it returns the key evicted, if one was. Call with s.mu
// held.
func (s *clockShard[V]) putLocked(key string, e entry[V], expires int64, tick uint64) (evicted string, ok bool) {
	return s.storeLocked(key, e, expires, tick, false)
}

// storeLocked is putLocked for a value or a tombstone.
func (s *clockShard[V]) storeLocked(key string, e entry[V], expires int64, tick uint64, tombstone bool) (evicted string, ok bool) {
	ce := &clockEntry[V]{key: key, e: e, expires: expires, tick: tick, tombstone: tombstone}
	if old, ok := s.load(key); ok { // a new entry in its place: readers hold the old one
		ce.slot = old.slot
		ce.used.Store(true)
		s.ring[ce.slot] = ce
		s.m.Store(key, ce)
		return "", false
	}
	if len(s.ring) < s.limit {
		ce.slot = len(s.ring)
		s.ring = append(s.ring, ce)
		s.m.Store(key, ce)
		s.n++
		return "", false
	}
	for { // CLOCK: clear the used bit until a slot whose entry was not used since
		victim := s.ring[s.hand]
		if victim == nil || !victim.used.Swap(false) {
			if victim != nil {
				s.m.Delete(victim.key)
				s.n--
				evicted, ok = victim.key, true
			}
			ce.slot = s.hand
			s.ring[s.hand] = ce
			s.m.Store(key, ce)
			s.n++
			s.hand = (s.hand + 1) % s.limit
			return evicted, ok
		}
		s.hand = (s.hand + 1) % s.limit
	}
}

// put stores e until expires.
func (c *clockMap[V]) put(key string, e entry[V], expires int64) {
	s := c.shard(key)
	s.mu.Lock()
	s.putLocked(key, e, expires, 0)
	s.mu.Unlock()
}

// liveLocked returns key's entry (or tombstone) while now (unix
// nanoseconds) is before its expiry; call with s.mu held.
func (s *clockShard[V]) liveLocked(key string, now int64) (*clockEntry[V], bool) {
	ce, ok := s.load(key)
	if !ok || now >= ce.expires {
		return nil, false
	}
	return ce, true
}

// deleteLocked removes key from s; call with s.mu held.
func (s *clockShard[V]) deleteLocked(key string) {
	if ce, ok := s.load(key); ok {
		s.m.Delete(key)
		s.n--
		s.ring[ce.slot] = nil
	}
}

func (c *clockMap[V]) delete(key string) {
	s := c.shard(key)
	s.mu.Lock()
	s.deleteLocked(key)
	s.mu.Unlock()
}

// clear drops everything.
func (c *clockMap[V]) clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.m.Clear()
		s.n = 0
		clear(s.ring)
		s.mu.Unlock()
	}
}

// sweep drops the entries expired at now (unix nanoseconds).
func (c *clockMap[V]) sweep(now int64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.m.Range(func(key, v any) bool {
			if now >= v.(*clockEntry[V]).expires {
				s.deleteLocked(key.(string))
			}
			return true
		})
		s.mu.Unlock()
	}
}

func (c *clockMap[V]) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.n
		s.mu.Unlock()
	}
	return n
}
