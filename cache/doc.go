// Package cache is a typed cache in front of an expensive origin that stops
// cache stampedes across a whole fleet.
//
// When a value is missing or expired, [Cache.GetOrCompute] lets exactly one
// caller in the fleet recompute it: callers inside one process share one call
// ([github.com/stampede-go/stampede/singleflight]), and the process that
// leads takes a per-key Redis lease ([github.com/stampede-go/stampede/lease])
// so that one process in the fleet computes while the others wait for its
// result, woken by a pub/sub notification. A value inside its stale window is
// served at once while one caller refreshes it in the background.
//
// All per-key state in Redis shares the hash tag {namespace:key}:
//
//	{ns:k}:v  the value envelope (msgpack), expiring after TTL + Stale
//	{ns:k}:l  the recompute lease's token
//	{ns:k}:f  the fencing counter, bumped by every acquisition, Set and Delete
//	{ns:k}:n  the pub/sub channel on which fills are announced
//
// A fill is written only while the fencing counter still equals the fence the
// writer acquired, so a writer whose lease expired, or whose key was deleted
// or Set while it computed, can never overwrite a newer value.
//
// With a nil Redis client the cache is process-local: the same decisions
// and the same fence over a bounded in-memory store, the same API. When Redis is unreachable, callers compute
// locally (coalesced in-process, Outcome [Degraded]) and a circuit breaker
// keeps them from paying Redis timeouts until it answers again.
package cache
