package lease

// A held lease, whichever backend (a Client or a Quorum) holds it: its
// keys, token and fence, its validity deadline by the holder's clock, and
// Release and Extend.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Keys returns the Redis keys that hold the lease and the fencing counter for
// name. Both carry the hash tag {name}, so they share one Cluster slot with
// any other key that starts with "{name}". A [Quorum] also leaves
// "{name}:a:<token>" for a TTL where a release found no grant of that token,
// and "{name}:r", the server's run_id, with the fence (see the package
// documentation).
func Keys(name string) (leaseKey, fenceKey string) {
	return "{" + name + "}:l", "{" + name + "}:f"
}

// Lease is a held lease. Its methods are safe for concurrent use.
type Lease struct {
	b        backend
	name     string
	key      string
	fenceKey string
	token    string
	fence    int64
	ttl      time.Duration

	// mu guards until: when the lease's validity ends unless extended, by
	// the holder's clock (monotonic where the clock gives it): the send
	// time of the acquisition or of the last extension, plus the TTL, less
	// the drift allowance; moved, closed (and replaced) when until moves;
	// and the extensions that are out (see [Lease.Extend]).
	mu    sync.Mutex
	until time.Time
	moved chan struct{}
	out   []*extension
}

// extension is one Extend while it is out: the validity deadline it gives
// (its send time plus its TTL, less the drift allowance), and the earliest
// such deadline among the extensions that overlapped it, its own
// included: Redis may have taken any of those after it.
type extension struct {
	until, floor time.Time
}

// newLease returns a held lease whose validity counts from sent.
func newLease(b backend, name, token string, fence int64, ttl time.Duration, sent time.Time) *Lease {
	key, fenceKey := Keys(name)
	l := &Lease{b: b, name: name, key: key, fenceKey: fenceKey, token: token, fence: fence, ttl: ttl}
	l.setValidFrom(sent, ttl)
	return l
}

func (l *Lease) setValidFrom(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.moveLocked(sent.Add(ttl - l.b.drift(ttl)))
}

// moveLocked sets the validity deadline to until and wakes those waiting
// for it to move. l.mu is held.
func (l *Lease) moveLocked(until time.Time) {
	if until.Equal(l.until) && l.moved != nil {
		return
	}
	l.until = until
	if l.moved != nil {
		close(l.moved)
	}
	l.moved = make(chan struct{})
}

// extending records an extension to ttl sent at sent. Redis may take it
// before it answers, or without its answer ever arriving, so from now on
// the validity ends no later than the extension's own deadline: a shorter
// TTL brings Until forward at once.
func (l *Lease) extending(sent time.Time, ttl time.Duration) *extension {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := &extension{until: sent.Add(ttl - l.b.drift(ttl))}
	e.floor = e.until
	for _, x := range l.out {
		x.floor = earliest(x.floor, e.until)
		e.floor = earliest(e.floor, x.until)
	}
	l.out = append(l.out, e)
	if e.until.Before(l.until) {
		l.moveLocked(e.until)
	}
	return e
}

// extended records that extension e has ended, taken when ok. One taken
// sets the deadline, later or earlier, to the earliest deadline among the
// extensions that overlapped it: the holder cannot tell which of them
// Redis took last. (One that failed may have been taken too; its deadline
// already holds Until down, since it was sent.)
func (l *Lease) extended(e *extension, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out = slices.DeleteFunc(l.out, func(x *extension) bool { return x == e })
	if ok {
		l.moveLocked(e.floor)
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// untilMoved returns a channel that is closed when the validity deadline
// next moves (an extension succeeded, or one to a shorter TTL was sent).
func (l *Lease) untilMoved() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.moved
}

// Until returns when the lease's validity ends, by the holder's clock: the
// time the acquisition or the last successful extension was sent, plus its
// TTL, less the clock drift allowance. Redis keeps the lease at least until
// then (it started the TTL on receiving the request), unless its clock runs
// faster than the allowance covers; after it, another holder may have the
// lease. [Lease.KeepAlive] and [Client.Using] cancel the work at this time.
func (l *Lease) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// remaining returns how much of the lease's validity is left by the
// holder's clock.
func (l *Lease) remaining() time.Duration { return l.Until().Sub(l.b.now()) }

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Key returns the Redis key that holds the token.
func (l *Lease) Key() string { return l.key }

// FenceKey returns the Redis key of the fencing counter.
func (l *Lease) FenceKey() string { return l.fenceKey }

// Token returns the random 128-bit token, hex-encoded, that proves ownership.
func (l *Lease) Token() string { return l.token }

// Fence returns the fencing token: the fence key's value at acquisition,
// max(previous + 1, the Redis server's clock in microseconds). It is higher
// for every later acquisition of the same name, also after a failover or a
// restart lost the fence key (unless the new server's clock is behind the
// old one's by more than the time since; even then the two fences differ,
// so an equality check still rejects the old holder). A [Quorum] lease's
// fence is one above the highest fence its granting majority held (each
// server's clock in microseconds included), written back to a majority
// before Acquire returned: above every fence an earlier quorum lease on the
// name handed out (the package documentation argues it).
func (l *Lease) Fence() int64 { return l.fence }

// TTL returns the TTL the lease was acquired with, which [Lease.KeepAlive]
// extends it by each time; an [Lease.Extend] to another TTL does not
// change it ([Lease.Until] says when the validity ends).
func (l *Lease) TTL() time.Duration { return l.ttl }

// Release gives the lease up. It returns [ErrLeaseLost], and deletes nothing,
// when the lease is no longer ours.
func (l *Lease) Release(ctx context.Context) error {
	err := l.b.release(ctx, l)
	opts := l.b.options()
	switch {
	case err == nil:
		opts.observe(ctx, Event{Kind: EventReleased, Name: l.name, Fence: l.fence, Remaining: l.remaining()})
	case errors.Is(err, ErrLeaseLost):
		opts.observe(ctx, Event{Kind: EventReleaseRejected, Name: l.name, Fence: l.fence})
	}
	return err
}

// Extend resets the lease's TTL to ttl. It returns [ErrLeaseLost], and
// changes nothing, when the lease is no longer ours. [Lease.Until] follows
// it, shorter TTLs included: once it succeeds, the validity ends ttl less
// the drift allowance after it was sent; while it is out (and after it
// failed, since Redis may have taken it all the same), no later than
// that. Where extensions overlap (an Extend of the caller's while
// [Lease.KeepAlive] extends), the earliest of their deadlines stands: the
// holder cannot tell which of them Redis took last. The work's context of
// KeepAlive and Using is cancelled at Until as it moves.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := validTTLFor(l.b, ttl); err != nil {
		return err
	}
	e := l.extending(l.b.now(), ttl)
	err := l.b.extend(ctx, l, ttl)
	l.extended(e, err == nil)
	return err
}

// String describes the lease for logs without revealing its token.
func (l *Lease) String() string {
	return fmt.Sprintf("lease %q fence %d ttl %s", l.name, l.fence, l.ttl)
}
