// Package localstore is the process-local store under cache: what a Cache
// without Redis holds instead of Redis. Entries live in a bounded map
// (internal/clockmap: CLOCK eviction past a bound on their number and one
// on their total cost, each dropped after its expiry), and claims have the
// same fence as Redis' leases: a fill stores only under the claim it was
// won with, and Set, Delete and Expire take a claim in flight away, so
// that process-local mode makes the decisions of Redis mode with the same
// guarantees.
//
// It holds its entries as they are, of a type E it never looks inside
// (cache's decoded entries): a local hit decodes nothing and callers share
// the value, which process-local mode exists for. So it speaks neither
// bytes nor cache's V; cache's adapter (local_store.go) is the only code
// that knows what an E is, and so what one weighs: each write comes with
// its entry's cost.
//
// Claims need no expiry: their holder is in this process and always fills
// or abandons. Waiters are woken by a buffered channel each, on every fill,
// abandon, Set, Delete and Expire of their key, and re-read: a wake carries
// no entry, since a read costs nothing here.
package localstore

import (
	"sync"
	"time"

	"github.com/stampede-go/stampede/cache/internal/clockmap"
)

// Store is the process-local store of entries of type E. Safe for
// concurrent use; a read takes no lock.
type Store[E any] struct {
	now     func() time.Time
	entries *clockmap.Map[E]

	mu      sync.Mutex
	claims  map[string]uint64 // key -> token of its holder
	waiters map[string]map[*Waiter]struct{}
	token   uint64 // the last token handed out
	gen     uint64 // the namespace's invalidation counter
}

// New returns an empty store holding at most size entries whose costs add
// up to at most maxCost (CLOCK eviction past either bound; 0: no bound on
// the costs), whose expiries are read on now. An entry weighing more than
// maxCost/16 is never held (see [Store.Fits]).
func New[E any](size int, maxCost int64, now func() time.Time) *Store[E] {
	return &Store[E]{now: now, entries: clockmap.NewWeighted[E](size, maxCost),
		claims: make(map[string]uint64), waiters: make(map[string]map[*Waiter]struct{})}
}

// Get returns key's entry, if one is held and its expiry has not passed.
func (s *Store[E]) Get(key string) (E, bool) {
	return s.entries.Get(key, s.now().UnixNano())
}

// Claimed is one key's answer to [Store.Claim].
type Claimed struct {
	// Won says the key was free and is now claimed with Token.
	Won   bool
	Token uint64
	// Gen is the namespace's invalidation counter when the claim was tried
	// (won or not): the stamp of what its compute produces.
	Gen uint64
}

// Claim tries to claim each of keys once, all under one lock: a key whose
// claim is held already (by a compute in this process, which always ends)
// is not won.
func (s *Store[E]) Claim(keys []string) []Claimed {
	out := make([]Claimed, len(keys))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		out[i].Gen = s.gen
		if _, held := s.claims[k]; held {
			continue
		}
		s.token++
		s.claims[k] = s.token
		out[i].Won, out[i].Token = true, s.token
	}
	return out
}

// holdsLocked reports whether token is still key's claim; call with s.mu
// held.
func (s *Store[E]) holdsLocked(key string, token uint64) bool {
	t, ok := s.claims[key]
	return ok && t == token
}

// Fits reports whether an entry weighing cost can be held: at most a
// sixteenth of the store's bound on costs (a shard's share of it).
func (s *Store[E]) Fits(cost int64) bool { return s.entries.Fits(cost) }

// Fill stores e, weighing cost, under key, until expires (Unix
// nanoseconds), if token is still key's claim, and releases the claim; it
// reports whether e was stored (false: fenced out by a later Set, Delete
// or Expire; or e does not [Store.Fits], which callers check first: then
// the claim is released as by Abandon and key's old entry dropped). Either
// way the key's waiters are woken.
func (s *Store[E]) Fill(key string, token uint64, e E, cost, expires int64) (stored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stored = s.holdsLocked(key, token); stored {
		delete(s.claims, key)
		stored = s.entries.PutWeighted(key, e, cost, expires)
	}
	s.wakeLocked(key)
	return stored
}

// Abandon releases key's claim without a value, if token still holds it,
// and wakes the key's waiters.
func (s *Store[E]) Abandon(key string, token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holdsLocked(key, token) {
		delete(s.claims, key)
	}
	s.wakeLocked(key)
}

// Set stores e, weighing cost, under key until expires, taking any claim
// in flight away (its fill is fenced out), and wakes the key's waiters. An
// e that does not [Store.Fits] (callers check first) is not stored, and
// key's old entry is dropped.
func (s *Store[E]) Set(key string, e E, cost, expires int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, key)
	s.entries.PutWeighted(key, e, cost, expires)
	s.wakeLocked(key)
}

// Delete removes key, taking any claim in flight away, and wakes the key's
// waiters.
func (s *Store[E]) Delete(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, key)
	s.entries.Delete(key)
	s.wakeLocked(key)
}

// Expire takes any claim of key in flight away and hands key's entry, if
// one is held, to end, which returns what replaces it (with its cost and
// expiry) or keep false to remove it; then it wakes the key's waiters. end
// runs under the store's lock, so no fill or Set of the key comes between
// its read and its write.
func (s *Store[E]) Expire(key string, end func(e E, now time.Time) (next E, cost, expires int64, keep bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, key)
	now := s.now()
	if e, ok := s.entries.Get(key, now.UnixNano()); ok {
		if next, cost, expires, keep := end(e, now); keep {
			s.entries.PutWeighted(key, next, cost, expires)
		} else {
			s.entries.Delete(key)
		}
	}
	s.wakeLocked(key)
}

// Waiter is one waiter's registration on a key: [Waiter.Ready] receives
// when the key must be read again.
type Waiter struct {
	s   interface{ remove(key string, w *Waiter) }
	key string
	c   chan struct{}
}

// Ready receives a value after each change of the key (coalesced: one
// pending at most).
func (w *Waiter) Ready() <-chan struct{} { return w.c }

// Close ends the registration.
func (w *Waiter) Close() { w.s.remove(w.key, w) }

// Subscribe registers a waiter on key. A change after Subscribe returns
// cannot be missed: a read that follows sees it, or Ready receives.
func (s *Store[E]) Subscribe(key string) *Waiter {
	w := &Waiter{s: s, key: key, c: make(chan struct{}, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.waiters[key]
	if ws == nil {
		ws = make(map[*Waiter]struct{})
		s.waiters[key] = ws
	}
	ws[w] = struct{}{}
	return w
}

func (s *Store[E]) remove(key string, w *Waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws := s.waiters[key]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(s.waiters, key)
		}
	}
}

// wakeLocked tells key's waiters to read again; call with s.mu held.
func (s *Store[E]) wakeLocked(key string) {
	for w := range s.waiters[key] {
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
}

// Gen returns the namespace's invalidation counter.
func (s *Store[E]) Gen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// Invalidate raises the namespace's invalidation counter and returns its
// new value.
func (s *Store[E]) Invalidate() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	return s.gen
}

// Sweep drops the entries whose expiry has passed.
func (s *Store[E]) Sweep() { s.entries.Sweep(s.now().UnixNano()) }

// Len returns the number of entries held, expired ones not yet swept
// included.
func (s *Store[E]) Len() int { return s.entries.Len() }

// Cost returns the sum of the costs of the entries held, expired ones not
// yet swept included.
func (s *Store[E]) Cost() int64 { return s.entries.Cost() }
