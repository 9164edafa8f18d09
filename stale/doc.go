// Package stale is the freshness policy of a cache entry, as pure functions
// of the current time: no Redis, no clock of its own, no goroutines.
//
// An entry written at time W with TTL t has these windows:
//
//	W ........ W+t ............ W+t+Stale ...... W+t+StaleIfError
//	|  fresh   |  stale (served  |  expired; kept  |  gone
//	|          |  while one      |  only to answer |
//	|          |  caller         |  when the       |
//	|          |  refreshes)     |  origin fails   |
//
// Inside the fresh window a caller may still refresh early: XFetch
// (Vattani, Chierichetti, Lowenstein, "Optimal Probabilistic Cache Stampede
// Prevention", VLDB 2015) refreshes at now when
//
//	now - Δ·β·ln(u) ≥ freshUntil,  u uniform in (0, 1]
//
// where Δ is how long the last compute took. The probability rises as
// expiry nears and with slower computes; β = 0 turns it off.
//
// TTL jitter spreads each write's TTL uniformly over t·(1 ± Jitter) so that
// keys written together do not expire together.
package stale
