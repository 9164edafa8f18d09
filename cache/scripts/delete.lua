-- Delete a value and move the fence on, so a compute in flight cannot write
-- its now outdated result; wake the waiters.
-- KEYS[1] value, KEYS[2] fence; ARGV[1] fence TTL (ms), ARGV[2] channel,
-- ARGV[3] invalidation channel, ARGV[4] invalidation ("instance key"), ARGV[5] '1' to announce on ARGV[2]
-- with SPUBLISH (sharded pub/sub on a Cluster; the invalidation is broadcast).
-- Returns the number of values deleted.
local n = redis.call('DEL', KEYS[1])
-- next_fence is internal/fencelua's, prepended (as in set.lua).
next_fence(KEYS[2], ARGV[1])
redis.call(ARGV[5] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], 'delete')
redis.call('PUBLISH', ARGV[3], ARGV[4])
return n
