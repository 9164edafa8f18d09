-- Write a value directly and move the fence on, so a compute in flight
-- cannot overwrite it later; announce it.
-- KEYS[1] value, KEYS[2] fence
-- ARGV[1] envelope, ARGV[2] value TTL (ms), ARGV[3] fence TTL (ms), ARGV[4] channel,
-- ARGV[5] invalidation channel, ARGV[6] invalidation ("instance key"), ARGV[7] '1' to announce on ARGV[4]
-- with SPUBLISH (sharded pub/sub on a Cluster; the invalidation is broadcast).
-- Returns the new fence.
-- The fence moves on as lease/acquire.lua moves it: max(previous + 1, the
-- server's clock in microseconds), so it also rises past fences lost in a
-- failover or a restart.
local t = redis.call('TIME')
local fence = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, t[1] * 1000000 + t[2])
redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call(ARGV[7] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[4], 'set')
redis.call('PUBLISH', ARGV[5], ARGV[6])
return fence
