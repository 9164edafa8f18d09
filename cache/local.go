package cache

import (
	"sync"
	"time"
)

// localEntry is an entry of the process-local store (rdb == nil).
type localEntry[V any] struct {
	value      V
	created    time.Time
	freshUntil time.Time
	staleUntil time.Time
}

// localStore holds entries in memory for a Cache without Redis. Expired
// entries are dropped on read and by a sweep every sweepEvery.
type localStore[V any] struct {
	mu sync.RWMutex
	m  map[string]localEntry[V]
}

func newLocalStore[V any]() *localStore[V] {
	return &localStore[V]{m: make(map[string]localEntry[V])}
}

func (s *localStore[V]) get(key string, now time.Time) (localEntry[V], bool) {
	s.mu.RLock()
	e, ok := s.m[key]
	s.mu.RUnlock()
	if ok && !now.Before(e.staleUntil) {
		s.mu.Lock()
		if cur, still := s.m[key]; still && !now.Before(cur.staleUntil) {
			delete(s.m, key)
		}
		s.mu.Unlock()
		return e, false
	}
	return e, ok
}

func (s *localStore[V]) put(key string, e localEntry[V]) {
	s.mu.Lock()
	s.m[key] = e
	s.mu.Unlock()
}

func (s *localStore[V]) delete(key string) bool {
	s.mu.Lock()
	_, ok := s.m[key]
	delete(s.m, key)
	s.mu.Unlock()
	return ok
}

func (s *localStore[V]) sweep(now time.Time) {
	s.mu.Lock()
	for k, e := range s.m {
		if !now.Before(e.staleUntil) {
			delete(s.m, k)
		}
	}
	s.mu.Unlock()
}
