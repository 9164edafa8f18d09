package cache

import (
	"context"
	"time"

	"github.com/stampede-go/stampede/lease"
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
}

// claim is the right to fill one key: a Redis lease, or a process-local
// one. It exists only while its holder computes.
type claim struct {
	lease *lease.Lease // Redis
	token uint64       // process-local
}

// claimed is one key's answer to a claim attempt: won, held by another
// owner for remaining, or failed (err).
type claimed struct {
	claim     claim
	won       bool
	remaining time.Duration
	err       error
}

// fillReq is one computed entry to store under its claim.
type fillReq[V any] struct {
	k     keys
	claim claim
	e     entry[V]
}

// fillResult says what became of one fillReq: stored, fenced out (a later
// claim, Set or Delete won), not storable (unstored: too large or not
// encodable; the claim was abandoned), or the store failed (failed: it is
// retried in the background).
type fillResult struct {
	stored   bool
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
	// claimMany tries to claim ks once each, in one round trip.
	claimMany(ctx context.Context, ks []keys) []claimed
	// keepAlive keeps a claim alive while its holder computes, until stop.
	keepAlive(ctx context.Context, cl claim) (stop func())
	// fillMany stores computed entries under their claims, in one round trip,
	// and releases the claims.
	fillMany(ctx context.Context, reqs []fillReq[V]) []fillResult
	// abandon releases a claim without a value and wakes the key's waiters.
	abandon(ctx context.Context, k keys, cl claim)
	// set stores e, taking any claim in flight away (its fill is fenced out).
	set(ctx context.Context, k keys, e entry[V]) error
	// delete removes key, taking any claim in flight away.
	delete(ctx context.Context, k keys) error
	// subscribe registers for key's notifications and returns once they
	// cannot be missed by a read that follows (or with an error: callers
	// then poll).
	subscribe(ctx context.Context, k keys) (subscription, error)
	// available reports whether the store may be used now (the breaker).
	available() bool
	// close stops the store's background work.
	close() error
}
