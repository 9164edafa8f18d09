-- Write a value directly and take the lease away, so a compute in flight
-- cannot overwrite it later (its fill finds no lease of its own); announce
-- it, with the envelope when it is small enough, and tell every replica's L1.
-- KEYS[1] value, KEYS[2] lease
-- ARGV[1] envelope, ARGV[2] value TTL (ms), ARGV[3] channel, ARGV[4] invalidation channel,
-- ARGV[5] invalidation ("instance key"), ARGV[6] '1' to announce on ARGV[3] with SPUBLISH
-- (sharded pub/sub on a Cluster; the invalidation is broadcast), ARGV[7] the
-- largest envelope a notification carries (bytes).
-- Returns 1 when a compute in flight lost its lease.
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local taken = redis.call('DEL', KEYS[2])
redis.call(ARGV[6] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[3], #ARGV[1] <= tonumber(ARGV[7]) and ARGV[1] or 'set')
redis.call('PUBLISH', ARGV[4], ARGV[5])
return taken
