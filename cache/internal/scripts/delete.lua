-- Delete a value and take the lease away, so a compute in flight cannot
-- write its now outdated result; wake the waiters and tell every replica's L1.
-- KEYS[1] value, KEYS[2] lease; ARGV[1] channel, ARGV[2] invalidation channel,
-- ARGV[3] invalidation ("instance key"), ARGV[4] '1' to announce on ARGV[1]
-- with SPUBLISH (sharded pub/sub on a Cluster; the invalidation is broadcast).
-- Returns the number of values deleted.
local n = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
redis.call(ARGV[4] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[1], 'delete')
redis.call('PUBLISH', ARGV[2], ARGV[3])
return n
