-- Delete a value and move the fence on, so a compute in flight cannot write
-- its now outdated result; wake the waiters.
-- KEYS[1] value, KEYS[2] fence; ARGV[1] fence TTL (ms), ARGV[2] channel,
-- ARGV[3] invalidation channel, ARGV[4] invalidation ("instance key"), ARGV[5] '1' to announce on ARGV[2]
-- with SPUBLISH (sharded pub/sub on a Cluster; the invalidation is broadcast).
-- Returns the number of values deleted.
local n = redis.call('DEL', KEYS[1])
-- The fence moves on as lease/acquire.lua moves it (see there).
local t = redis.call('TIME')
local fence = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, t[1] * 1000000 + t[2])
redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[1])
redis.call(ARGV[5] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], 'delete')
redis.call('PUBLISH', ARGV[3], ARGV[4])
return n
