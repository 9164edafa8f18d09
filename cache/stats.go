package cache

import "sync/atomic"

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
	// RedisErrors counts failed Redis calls.
	RedisErrors uint64
	// BreakerOpen reports whether Redis is considered down right now.
	BreakerOpen bool
}

type counters struct {
	outcomes                           [8]atomic.Uint64
	computes, computeErrors, refreshes atomic.Uint64
	corrupt, fencedOut, redisErrors    atomic.Uint64
	staleOnError, negativeStored       atomic.Uint64
	negativeHits                       atomic.Uint64
}

func (s *counters) outcome(o Outcome) {
	if int(o) < len(s.outcomes) {
		s.outcomes[o].Add(1)
	}
}

// Stats returns a snapshot of the Cache's counters.
func (c *Cache[V]) Stats() Stats {
	s := &c.stats
	return Stats{
		Hits: s.outcomes[Hit].Load(), Misses: s.outcomes[Miss].Load(), Shared: s.outcomes[Shared].Load(),
		Waited: s.outcomes[Waited].Load(), Stale: s.outcomes[Stale].Load(),
		Fallbacks: s.outcomes[Fallback].Load(), Degraded: s.outcomes[Degraded].Load(),
		Computes: s.computes.Load(), ComputeErrors: s.computeErrors.Load(), Refreshes: s.refreshes.Load(),
		StaleOnError: s.staleOnError.Load(), NegativeStored: s.negativeStored.Load(), NegativeHits: s.negativeHits.Load(),
		Corrupt: s.corrupt.Load(), FencedOut: s.fencedOut.Load(), RedisErrors: s.redisErrors.Load(),
		BreakerOpen: c.brk.open(),
	}
}
