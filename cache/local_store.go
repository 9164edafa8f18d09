package cache

import (
	"context"
	"sync"
	"time"

	"github.com/stampede-go/stampede/cache/internal/clockmap"
	"github.com/stampede-go/stampede/cache/internal/marks"
)

// localStore is the [store] of a Cache without Redis: entries in a bounded
// map (MaxLocalEntries, CLOCK eviction, dropped after their last window),
// and claims with the same fence as Redis' leases: a fill stores only under
// the claim it was won with, and Set and Delete take a claim in flight away.
// Claims need no expiry: their holder is in this process and always fills
// or abandons (a compute past ComputeTimeout is abandoned).
type localStore[V any] struct {
	now     func() time.Time
	entries *clockmap.Map[entry[V]]

	mu      sync.Mutex
	claims  map[string]uint64 // key -> token of its holder
	waiters map[string]map[*localWaiter]struct{}
	token   uint64
	gen     uint64 // the namespace's invalidation counter
}

var _ store[struct{}] = (*localStore[struct{}])(nil)

func newLocalStore[V any](size int, now func() time.Time) *localStore[V] {
	return &localStore[V]{now: now, entries: clockmap.New[entry[V]](size),
		claims: make(map[string]uint64), waiters: make(map[string]map[*localWaiter]struct{})}
}

func (s *localStore[V]) read(_ context.Context, k keys, _ readMode) (entry[V], bool, error) {
	e, ok := s.entries.Get(k.Key, s.now().UnixNano())
	return e, ok, nil
}

func (s *localStore[V]) readMany(ctx context.Context, ks []keys, _ readMode, each func(i int, e entry[V], found bool)) error {
	for i, k := range ks {
		e, found, _ := s.read(ctx, k, readOwn)
		each(i, e, found)
	}
	return nil
}

func (s *localStore[V]) claimMany(_ context.Context, ks []keys) []claimed[V] {
	out := make([]claimed[V], len(ks))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range ks {
		if _, held := s.claims[k.Key]; held {
			out[i].claim.gen = s.gen // held by a compute in this process: wait for it
			continue
		}
		s.token++
		s.claims[k.Key] = s.token
		out[i] = claimed[V]{claim: claim[V]{k: k, local: s.token, gen: s.gen}, won: true}
	}
	return out
}

func (s *localStore[V]) keepAlive(context.Context, claim[V]) func() { return func() {} }

// holdsLocked reports whether cl is still key's claim; call with s.mu held.
func (s *localStore[V]) holdsLocked(key string, cl claim[V]) bool {
	t, ok := s.claims[key]
	return ok && t == cl.local
}

func (s *localStore[V]) fillMany(_ context.Context, reqs []fillReq[V]) []fillResult {
	out := make([]fillResult, len(reqs))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range reqs {
		if s.holdsLocked(r.k.Key, r.claim) {
			delete(s.claims, r.k.Key)
			s.entries.Put(r.k.Key, r.e, r.e.w.ErrorUntil.UnixNano())
			out[i].stored = true
		} else {
			out[i].fenced = true
		}
		s.wakeLocked(r.k.Key)
	}
	return out
}

func (s *localStore[V]) abandon(_ context.Context, k keys, cl claim[V]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holdsLocked(k.Key, cl) {
		delete(s.claims, k.Key)
	}
	s.wakeLocked(k.Key)
}

func (s *localStore[V]) set(_ context.Context, k keys, e entry[V]) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, k.Key) // the compute in flight, if any, is fenced out
	s.entries.Put(k.Key, e, e.w.ErrorUntil.UnixNano())
	s.wakeLocked(k.Key)
	return 0, nil
}

func (s *localStore[V]) delete(_ context.Context, k keys) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, k.Key)
	s.entries.Delete(k.Key)
	s.wakeLocked(k.Key)
	return nil
}

// localWaiter is one waiter's registration on a key of the local store.
type localWaiter struct {
	key string
	c   chan struct{}
	off func()
}

func (w *localWaiter) ready() <-chan struct{} { return w.c }
func (w *localWaiter) close()                 { w.off() }

// readNotified implements [store]: local notifications carry no entry, and
// a read costs nothing.
func (s *localStore[V]) readNotified(ctx context.Context, k keys, _ subscription) (entry[V], bool, error) {
	return s.read(ctx, k, readWaiting)
}

func (s *localStore[V]) subscribe(_ context.Context, k keys) (subscription, error) {
	w := &localWaiter{key: k.Key, c: make(chan struct{}, 1)}
	w.off = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ws := s.waiters[k.Key]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(s.waiters, k.Key)
			}
		}
	}
	s.mu.Lock()
	ws := s.waiters[k.Key]
	if ws == nil {
		ws = make(map[*localWaiter]struct{})
		s.waiters[k.Key] = ws
	}
	ws[w] = struct{}{}
	s.mu.Unlock()
	return w, nil
}

// wakeLocked tells key's waiters to re-read; call with s.mu held.
func (s *localStore[V]) wakeLocked(key string) {
	for w := range s.waiters[key] {
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
}

func (s *localStore[V]) readGen(context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, nil
}

// readMarks implements [store]; it is never called: in process-local mode
// the Cache's marks are the truth.
func (s *localStore[V]) readMarks(_ context.Context, tags []string) ([]marks.Mark, error) {
	return make([]marks.Mark, len(tags)), nil
}

// invalidate implements [store]: the counter only; the Cache raises its
// marks, which are the truth here.
func (s *localStore[V]) invalidate(context.Context, []string, bool) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	return s.gen, nil
}

func (s *localStore[V]) available() bool { return true }

func (s *localStore[V]) close() error { return nil }

// sweep drops the entries past their last window.
func (s *localStore[V]) sweep() { s.entries.Sweep(s.now().UnixNano()) }
