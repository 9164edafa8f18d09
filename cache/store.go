package cache

import (
	"context"
	"time"

	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/stale"
)

// entry is a decoded entry, from Redis or from the process-local store.
type entry[V any] struct {
	value    V
	w        stale.Windows
	took     time.Duration // how long its compute took (XFetch's Δ)
	negative bool          // a cached "not found"
	// failSafe marks a stale value re-armed because the origin failed: it
	// answers as Stale while fresh, and no caller refreshes it meanwhile.
	failSafe bool
	// digest identifies the envelope the entry was read from, for L1 (see
	// [l1.put]); 0 when unknown or L1 is off. size is that envelope's
	// length, what the entry weighs against L1MaxBytes.
	digest uint64
	size   int
	// stamp is what the invalidation checks read: see internal/marks.
	stamp marks.Stamp
	// kept: computed while Redis was unreachable (degraded), and never
	// stored there. Its stamp.Gen is keptFloor when its compute began, not a
	// generation: only this process's own invalidations, which raise
	// keptFloor, are known to reach it (see Cache.invalidationAt).
	kept bool
}

// claim is the right to fill one key: a Redis lease (its holder's random
// token under {ns:k}:l), or a process-local one. It exists only while its
// holder computes; a fill is a compare-and-set against it, and a Set or
// Delete takes it away.
type claim[V any] struct {
	k     keys
	token string // Redis: the holder's random lease token
	local uint64 // process-local
	// reread says the store read the key when the claim was won (Redis: in
	// the claim script, no round trip of its own): seen and found are what
	// it found, so the lead needs no read of its own.
	reread bool
	found  bool
	seen   entry[V]
	// raw is seen's value as the codec encoded it (a slice of the claim's
	// reply; Redis only): re-arming seen with new windows (ErrUnchanged, the
	// fail-safe) rewrites the envelope's header around it, with no Encode.
	raw string
	// gen is the namespace's invalidation counter, read with the claim,
	// before the compute starts: the stamp of what it computes.
	gen uint64
}

// claimed is one key's answer to a claim attempt: won, held by another
// owner for remaining, or failed (err). Won or held, claim.gen is the
// namespace's invalidation counter read in the same step: a compute done
// without the claim (OnBusy) is stamped with the latest one read.
type claimed[V any] struct {
	claim     claim[V]
	won       bool
	remaining time.Duration
	err       error
}

// fillReq is one computed entry to store under its claim.
type fillReq[V any] struct {
	k     keys
	claim claim[V]
	e     entry[V]
	// raw, when set, is e.value already encoded (a previous value re-armed):
	// the store writes it as it is instead of encoding e.value.
	raw string
}

// fillResult says what became of one fillReq: stored, fenced out (a later
// claim, Set or Delete won), not storable (unstored: too large or not
// encodable; the claim was abandoned), or the store failed (failed: it is
// retried in the background).
type fillResult struct {
	stored   bool
	digest   uint64 // stored: the stored envelope's L1 digest (0: L1 off)
	size     int    // stored: the stored envelope's length (with digest)
	fenced   bool
	unstored error
	failed   bool
}

// readMode says which read a decision needs.
type readMode uint8

const (
	// readShared is the hit path's read: concurrent reads of one key share
	// one round trip.
	readShared readMode = iota
	// readOwn is a read of its own, for a decision that must see every
	// write that finished before it started (a lead's re-read).
	readOwn
	// readWaiting is readOwn for a waiter, whose failures do not count
	// towards the breaker (see Cache.waitFailed).
	readWaiting
)

// subscription is a waiter's registration for a key's fill, abandon, Set
// and Delete notifications.
type subscription interface {
	// ready receives a value when the key must be re-read.
	ready() <-chan struct{}
	close()
}

// reread hands each of ks the entry its claim found when it was won, or,
// when a claim carries none (the process-local store), reads them all in
// one round trip of their own (readOwn).
func reread[V any](ctx context.Context, s store[V], ks []keys, cls []claim[V], each func(i int, e entry[V], found bool)) error {
	if !fromClaims(cls) {
		return s.readMany(ctx, ks, readOwn, each)
	}
	for i, cl := range cls {
		each(i, cl.seen, cl.found)
	}
	return nil
}

// fromClaims reports whether reread hands out what the claims found (so
// that a claim's raw is the encoding of the entry handed out).
func fromClaims[V any](cls []claim[V]) bool {
	for _, cl := range cls {
		if !cl.reread {
			return false
		}
	}
	return true
}

// store is the storage seam: every decision path (hit, lead, fill, wait,
// stale-if-error, batch, Set, Delete) runs its steps through it, so Redis
// and process-local mode make the same decisions with the same fences. A
// fill succeeds only under the claim that was won for it and while no later
// claim, Set or Delete happened.
type store[V any] interface {
	// read returns key's entry; found is false for a missing, corrupt or
	// foreign entry. Only a failure of the store is an error.
	read(ctx context.Context, k keys, mode readMode) (e entry[V], found bool, err error)
	// readMany reads ks in one round trip and hands each key's entry to
	// each; mode is readShared (counting corrupt entries) or readOwn.
	readMany(ctx context.Context, ks []keys, mode readMode, each func(i int, e entry[V], found bool)) error
	// claimMany tries to claim ks once each, in one round trip; a claim won
	// may carry the key's entry as it was when it was won (see reread).
	claimMany(ctx context.Context, ks []keys) []claimed[V]
	// keepAlive keeps a claim alive while its holder computes, until stop.
	keepAlive(ctx context.Context, cl claim[V]) (stop func())
	// fillMany stores computed entries under their claims, in one round trip,
	// and releases the claims.
	fillMany(ctx context.Context, reqs []fillReq[V]) []fillResult
	// abandon releases a claim without a value and wakes the key's waiters.
	abandon(ctx context.Context, k keys, cl claim[V])
	// set stores e, taking any claim in flight away (its fill is fenced
	// out), and returns the stored envelope's length (0: nothing encoded)
	// and its L1 digest (0: L1 off).
	set(ctx context.Context, k keys, e entry[V]) (size int, digest uint64, err error)
	// delete removes key, taking any claim in flight away.
	delete(ctx context.Context, k keys) error
	// notified is the entry the latest notification on sub carried, when
	// it carried one since the last call (found); a waiter takes it
	// without a round trip, else it reads (readWaiting).
	notified(ctx context.Context, k keys, sub subscription) (e entry[V], found bool)
	// subscribe registers for key's notifications and returns once they
	// cannot be missed by a read that follows (or with an error: callers
	// then poll).
	subscribe(ctx context.Context, k keys) (subscription, error)
	// readGen returns the namespace's invalidation counter.
	readGen(ctx context.Context) (uint64, error)
	// readMarks returns the marks of tags ("" is the namespace's, which
	// Clear raises), in one round trip.
	readMarks(ctx context.Context, tags []string) ([]marks.Mark, error)
	// invalidate raises the counter and then the hard (or soft) mark of
	// each of tags (nil: the namespace's) to its new value, announces the
	// new marks to the other replicas, and returns that value.
	invalidate(ctx context.Context, tags []string, soft bool) (uint64, error)
	// available reports whether the store may be used now (the breaker).
	available() bool
	// availableWait is available, except that the call that ends the
	// breaker's cooldown waits for its probe, up to one Redis budget and
	// ctx (see redisstep.Breaker.AllowWait).
	availableWait(ctx context.Context) bool
	// close stops the store's background work.
	close() error
}
