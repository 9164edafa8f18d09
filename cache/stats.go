package cache

import (
	"math/rand/v2"
	"sync/atomic"
)

// Stats are a Cache's counters since New. Outcome counts are per caller.
type Stats struct {
	Hits, Misses, Shared, Waited, Stale, Fallbacks, Degraded uint64
	// Computes is how many times this process ran a compute function
	// (including fallbacks); ComputeErrors how many of those failed.
	Computes, ComputeErrors uint64
	// Refreshes is how many background refreshes this process ran.
	Refreshes uint64
	// Corrupt counts entries under our keys that were not ours or did not
	// decode; they were treated as misses and overwritten.
	Corrupt uint64
	// FencedOut counts fills rejected because a newer lease, Set or Delete
	// happened while computing.
	FencedOut uint64
	// StaleOnError counts stale values served because the compute failed.
	StaleOnError uint64
	// NegativeStored counts "not found" results cached; NegativeHits the
	// callers answered by one.
	NegativeStored, NegativeHits uint64
	// L1Hits counts callers answered from the in-process tier; L1Clears how
	// often it was cleared after a reconnect; L1Entries its current size;
	// L1Tracked the keys whose channel it subscribes to hear their writes
	// (each a subscription in Redis; at most twice L1Size).
	L1Hits, L1Clears     uint64
	L1Entries, L1Tracked int
	// RedisErrors counts failed Redis calls.
	RedisErrors uint64
	// Refills counts computed values stored by a background retry after
	// their fill first failed on a Redis error (a failover, a restart).
	Refills uint64
	// FailSafe counts stale values re-armed for FailSafeThrottle after the
	// origin failed; SoftTimeouts the computes that ran past SoftTimeout
	// while a stale value answered.
	FailSafe, SoftTimeouts uint64
	// Revalidated counts computes answered by ErrUnchanged: the previous
	// value was stored again without being rebuilt.
	Revalidated uint64
	// Invalidated counts entries that did not answer, or answered only as
	// expired, because InvalidateTags, ExpireTags or Clear invalidated them
	// (or their marks could not be read): once per read of an entry from
	// the store (a caller's, a waiter's, a batch's), however often the
	// entry is checked again afterwards; L1's copies are not counted, the
	// read of Redis that follows is. Recomputed the computes (or, for
	// an invalidation that came while the value was being stored, the
	// loads) done again because an invalidation came while they ran.
	Invalidated, Recomputed uint64
	// Unstored counts computed values that could not be stored (over
	// MaxValueBytes, or MaxLocalBytes/16 without Redis, or the codec
	// failed): they answered their callers, and the next call computes
	// again.
	Unstored uint64
	// LocalEntries is the size of the process-local store (no Redis);
	// LocalBytes what its entries weigh against MaxLocalBytes (see
	// [Weigher]).
	LocalEntries int
	LocalBytes   int64
	// BreakerOpen reports whether Redis is considered down right now.
	BreakerOpen bool
}

type counters struct {
	outcomes                           [8]striped
	computes, computeErrors, refreshes atomic.Uint64
	corrupt, fencedOut, redisErrors    atomic.Uint64
	staleOnError, negativeStored       atomic.Uint64
	negativeHits, refills, unstored    atomic.Uint64
	failSafe, softTimeouts             atomic.Uint64
	revalidated                        atomic.Uint64
	invalidated, recomputed            atomic.Uint64
	l1Hits                             striped
}

func (s *counters) outcome(o Outcome) {
	if int(o) < len(s.outcomes) {
		s.outcomes[o].add()
	}
}

// Stats returns a snapshot of the Cache's counters.
func (c *Cache[V]) Stats() Stats {
	s := &c.stats
	st := Stats{
		Hits: s.outcomes[Hit].load(), Misses: s.outcomes[Miss].load(), Shared: s.outcomes[Shared].load(),
		Waited: s.outcomes[Waited].load(), Stale: s.outcomes[Stale].load(),
		Fallbacks: s.outcomes[Fallback].load(), Degraded: s.outcomes[Degraded].load(),
		Computes: s.computes.Load(), ComputeErrors: s.computeErrors.Load(), Refreshes: s.refreshes.Load(),
		StaleOnError: s.staleOnError.Load(), NegativeStored: s.negativeStored.Load(), NegativeHits: s.negativeHits.Load(),
		Corrupt: s.corrupt.Load(), FencedOut: s.fencedOut.Load(), RedisErrors: s.redisErrors.Load(),
		Refills: s.refills.Load(), Unstored: s.unstored.Load(),
		FailSafe: s.failSafe.Load(), SoftTimeouts: s.softTimeouts.Load(), Revalidated: s.revalidated.Load(),
		Invalidated: s.invalidated.Load(), Recomputed: s.recomputed.Load(),
		BreakerOpen: c.brk.Open(), L1Hits: s.l1Hits.load(),
	}
	if c.local != nil {
		st.LocalEntries, st.LocalBytes = c.local.len(), c.local.bytes()
	}
	if c.l1 != nil {
		st.L1Clears, st.L1Entries, st.L1Tracked = uint64(c.l1.clears.Load()), c.l1.len(), c.l1Tracked()
	}
	return st
}

// striped is a counter spread over cache lines, so that callers on many
// cores counting hits do not contend on one.
type striped struct {
	slots [8]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

func (s *striped) add() { s.slots[rand.Uint32()%8].n.Add(1) }

// l1Hit counts an L1 hit as a hit too, with one draw for both stripes.
func (s *counters) l1Hit() {
	i := rand.Uint32() % 8
	s.outcomes[Hit].slots[i].n.Add(1)
	s.l1Hits.slots[i].n.Add(1)
}

func (s *striped) load() uint64 {
	var t uint64
	for i := range s.slots {
		t += s.slots[i].n.Load()
	}
	return t
}
