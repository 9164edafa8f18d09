-- Write a value directly and move the fence on, so a compute in flight
-- cannot overwrite it later; announce it.
-- KEYS[1] value, KEYS[2] fence
-- ARGV[1] envelope, ARGV[2] value TTL (ms), ARGV[3] fence TTL (ms), ARGV[4] channel,
-- ARGV[5] invalidation channel, ARGV[6] invalidation ("instance key"), ARGV[7] '1' to announce on ARGV[4]
-- with SPUBLISH (sharded pub/sub on a Cluster; the invalidation is broadcast).
-- Returns the new fence.
-- next_fence is internal/fencelua's, prepended: the fence moves on as a
-- lease acquisition moves it.
local fence = next_fence(KEYS[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call(ARGV[7] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[4], 'set')
redis.call('PUBLISH', ARGV[5], ARGV[6])
return fence
