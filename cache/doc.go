// Package cache is a typed cache in front of an expensive origin that stops
// cache stampedes across a whole fleet.
//
// When a value is missing or expired, [Cache.GetOrCompute] lets exactly one
// caller in the fleet recompute it: callers inside one process share one call
// ([github.com/stampede-go/stampede/singleflight]), and the process that
// leads takes a per-key Redis lease so that one process in the fleet
// computes while the others wait for its result, which the fill's pub/sub
// notification carries to them. A value inside its stale window is served at
// once while one caller refreshes it in the background.
//
// All per-key state in Redis shares the hash tag {namespace:key}; at rest a
// cached entry is one Redis key:
//
//	{ns:k}:v  the value envelope, expiring after its last window
//	{ns:k}:l  the recompute lease: its holder's random token, only while it computes
//	{ns:k}:n  the pub/sub channel on which fills are announced (with the value)
//
// A fill is a compare-and-set against the writer's own lease token, and Set,
// Delete and Expire take the lease away, so a writer whose lease expired or was lost
// in a failover, or whose key was deleted or Set while it computed, can never
// overwrite a newer value.
//
// With a nil Redis client the cache is process-local: the same decisions
// and the same claims over an in-memory store bounded by entries and by
// bytes (Options.MaxLocalEntries, Options.MaxLocalBytes; a value type
// says its weight by implementing [Weigher]), the same API. When
// Redis is unreachable, callers compute locally (coalesced in-process,
// Outcome [Degraded], each key once per DegradedTTL) and a circuit breaker
// keeps them from paying Redis timeouts until a background probe finds it
// answering again. When the origin fails, a value inside its StaleIfError
// window answers and is re-armed for FailSafeThrottle across the fleet.
//
// [New] does not dial Redis, so a wrong address shows only once calls
// are made: they answer Degraded, and the first one's failure is logged
// with its cause ("connect: connection refused"). Call [Cache.Ping] at
// start-up and from a readiness probe to find it before. A value reads back the same from every path (a compute, L1, Redis,
// process-local mode): New refuses a value type with a field the default
// codec would drop, such as an unexported one (see
// [Options.AllowDroppedFields]). A value handed out is shared with L1 and
// the process-local store: do not modify it.
package cache
