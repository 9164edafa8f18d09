package cache

import (
	"context"
	"fmt"
	"time"

	"github.com/stampede-go/stampede/cache/internal/localstore"
	"github.com/stampede-go/stampede/cache/internal/marks"
)

// localStore is the [store] of a Cache without Redis: the seam's thin
// adapter over internal/localstore, which holds the entries as they are
// (a local hit decodes nothing) with the same fence as Redis' leases. What
// an entry is, and so its expiry (its last window), how Expire ends its
// windows and what it weighs against MaxLocalBytes (localCost), is said
// here.
type localStore[V any] struct {
	s        *localstore.Store[entry[V]]
	maxBytes int64 // MaxLocalBytes, for the error of an entry too heavy
}

var _ store[struct{}] = (*localStore[struct{}])(nil)

func newLocalStore[V any](size int, maxBytes int64, now func() time.Time) *localStore[V] {
	return &localStore[V]{s: localstore.New[entry[V]](size, maxBytes, now), maxBytes: maxBytes}
}

// weigh returns what key's entry e weighs, and an error matching
// ErrValueTooLarge when that is more than the store holds in one entry
// (MaxLocalBytes/16).
func (s *localStore[V]) weigh(key string, e *entry[V]) (int64, error) {
	cost := localCost(key, e)
	if !s.s.Fits(cost) {
		return cost, fmt.Errorf("%w: the entry weighs %d bytes, over the process-local store's limit for one entry, %d (Options.MaxLocalBytes/16)", ErrValueTooLarge, cost, s.maxBytes/16)
	}
	return cost, nil
}

// expires is when the store drops e: after its last window.
func expires[V any](e entry[V]) int64 { return e.w.ErrorUntil.UnixNano() }

func (s *localStore[V]) read(_ context.Context, k keys, _ readMode) (entry[V], bool, error) {
	e, ok := s.s.Get(k.Key)
	return e, ok, nil
}

func (s *localStore[V]) readMany(_ context.Context, ks []keys, _ readMode, each func(i int, e entry[V], found bool)) error {
	for i, k := range ks {
		e, found := s.s.Get(k.Key)
		each(i, e, found)
	}
	return nil
}

func (s *localStore[V]) claimMany(_ context.Context, ks []keys) []claimed[V] {
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.Key
	}
	out := make([]claimed[V], len(ks))
	for i, c := range s.s.Claim(names) {
		// Not won: held by a compute in this process, to be waited for.
		out[i] = claimed[V]{claim: claim[V]{gen: c.Gen}, won: c.Won}
		if c.Won {
			out[i].claim.k, out[i].claim.local = ks[i], c.Token
		}
	}
	return out
}

func (s *localStore[V]) keepAlive(context.Context, claim[V]) func() { return func() {} }

func (s *localStore[V]) fillMany(_ context.Context, reqs []fillReq[V]) []fillResult {
	out := make([]fillResult, len(reqs))
	for i, r := range reqs {
		cost, err := s.weigh(r.k.Key, &r.e)
		if err != nil { // as the Redis store does with a value over MaxValueBytes
			out[i].unstored = err
			s.s.Abandon(r.k.Key, r.claim.local)
			continue
		}
		out[i].stored = s.s.Fill(r.k.Key, r.claim.local, r.e, cost, expires(r.e))
		out[i].fenced = !out[i].stored
	}
	return out
}

func (s *localStore[V]) abandon(_ context.Context, k keys, cl claim[V]) {
	s.s.Abandon(k.Key, cl.local)
}

// set implements [store]: an entry too heavy to hold is refused with an
// error matching ErrValueTooLarge, and nothing changes (as the Redis
// store refuses a value over MaxValueBytes).
func (s *localStore[V]) set(_ context.Context, k keys, e entry[V]) (int, uint64, error) {
	cost, err := s.weigh(k.Key, &e)
	if err != nil {
		return 0, 0, err
	}
	s.s.Set(k.Key, e, cost, expires(e))
	return 0, 0, nil
}

func (s *localStore[V]) delete(_ context.Context, k keys) error {
	s.s.Delete(k.Key)
	return nil
}

// expire is Expire on the local store: the entry's windows end now (see
// expireWindows), and a claim in flight is taken away.
func (s *localStore[V]) expire(k keys) {
	s.s.Expire(k.Key, func(e entry[V], now time.Time) (entry[V], int64, int64, bool) {
		w, keep := expireWindows(e.w, e.failSafe, now)
		if !keep || e.negative {
			return e, 0, 0, false
		}
		e.w = w
		return e, localCost(k.Key, &e), expires(e), true
	})
}

// localSub is a waiter's subscription on the local store.
type localSub struct{ w *localstore.Waiter }

func (l localSub) ready() <-chan struct{} { return l.w.Ready() }
func (l localSub) close()                 { l.w.Close() }

// notified implements [store]: local notifications carry no entry, and a
// read costs nothing.
func (s *localStore[V]) notified(context.Context, keys, subscription) (entry[V], bool) {
	return entry[V]{}, false
}

func (s *localStore[V]) subscribe(_ context.Context, k keys) (subscription, error) {
	return localSub{s.s.Subscribe(k.Key)}, nil
}

func (s *localStore[V]) readGen(context.Context) (uint64, error) { return s.s.Gen(), nil }

// readMarks implements [store]; it is never called: in process-local mode
// the Cache's marks are the truth.
func (s *localStore[V]) readMarks(_ context.Context, tags []string) ([]marks.Mark, error) {
	return make([]marks.Mark, len(tags)), nil
}

// invalidate implements [store]: the counter only; the Cache raises its
// marks, which are the truth here.
func (s *localStore[V]) invalidate(context.Context, []string, bool) (uint64, error) {
	return s.s.Invalidate(), nil
}

func (s *localStore[V]) available() bool { return true }

func (s *localStore[V]) availableWait(context.Context) bool { return true }

func (s *localStore[V]) close() error { return nil }

// sweep drops the entries past their last window.
func (s *localStore[V]) sweep() { s.s.Sweep() }

// len returns the number of entries held (Stats.LocalEntries).
func (s *localStore[V]) len() int { return s.s.Len() }

// bytes returns what the entries held weigh (Stats.LocalBytes).
func (s *localStore[V]) bytes() int64 { return s.s.Cost() }
