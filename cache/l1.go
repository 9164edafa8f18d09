package cache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// l1 is the optional in-process tier in front of Redis: a bounded, sharded
// map with CLOCK (second-chance) eviction. Entries keep the envelope's
// windows and expire after L1TTL at the latest. A value handed out from it
// is shared between callers.
type l1[V any] struct {
	ttl    time.Duration
	seed   maphash.Seed
	shards [l1Shards]l1Shard[V]
	clears atomic.Int64
}

const l1Shards = 16

type l1Shard[V any] struct {
	mu    sync.RWMutex
	m     map[string]*l1Entry[V]
	ring  []*l1Entry[V] // CLOCK ring; nil slots are free
	hand  int
	limit int
}

type l1Entry[V any] struct {
	key     string
	e       entry[V]
	expires int64 // unix nanoseconds
	slot    int
	used    atomic.Bool
}

func newL1[V any](size int, ttl time.Duration) *l1[V] {
	c := &l1[V]{ttl: ttl, seed: maphash.MakeSeed()}
	per := max(size/l1Shards, 1)
	for i := range c.shards {
		c.shards[i] = l1Shard[V]{m: make(map[string]*l1Entry[V], per), ring: make([]*l1Entry[V], per), limit: per}
	}
	return c
}

func (c *l1[V]) shard(key string) *l1Shard[V] {
	return &c.shards[maphash.String(c.seed, key)%l1Shards]
}

// get returns key's entry while it is inside its L1 lifetime.
func (c *l1[V]) get(key string, now time.Time) (entry[V], bool) {
	s := c.shard(key)
	s.mu.RLock()
	le, ok := s.m[key]
	var e entry[V]
	var expires int64
	if ok {
		e, expires = le.e, le.expires
	}
	s.mu.RUnlock()
	if !ok || now.UnixNano() >= expires {
		return entry[V]{}, false
	}
	if !le.used.Load() {
		le.used.Store(true)
	}
	return e, true
}

// put stores a fresh entry until min(now + ttl, its fresh-until).
func (c *l1[V]) put(key string, e entry[V], now time.Time) {
	exp := min(now.Add(c.ttl).UnixNano(), e.w.FreshUntil.UnixNano())
	if exp <= now.UnixNano() {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.m[key]; ok {
		old.e, old.expires = e, exp
		old.used.Store(true)
		return
	}
	le := &l1Entry[V]{key: key, e: e, expires: exp}
	for { // CLOCK: clear the used bit until a slot whose entry was not used since
		victim := s.ring[s.hand]
		if victim == nil || !victim.used.Swap(false) {
			if victim != nil {
				delete(s.m, victim.key)
			}
			le.slot = s.hand
			s.ring[s.hand] = le
			s.m[key] = le
			s.hand = (s.hand + 1) % s.limit
			return
		}
		s.hand = (s.hand + 1) % s.limit
	}
}

func (c *l1[V]) delete(key string) {
	s := c.shard(key)
	s.mu.Lock()
	if le, ok := s.m[key]; ok {
		delete(s.m, key)
		s.ring[le.slot] = nil
	}
	s.mu.Unlock()
}

// clear drops everything: after missed invalidations nothing can be vouched for.
func (c *l1[V]) clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		clear(s.ring)
		s.mu.Unlock()
	}
}

func (c *l1[V]) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
