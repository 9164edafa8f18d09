-- Write a value directly and take the lease away, so a compute in flight
-- cannot overwrite it later (its fill finds no lease of its own); announce
-- it on the key's channel, with the envelope when it is small enough, to its
-- waiters and to the L1 of every replica that tracks the key.
-- KEYS[1] value, KEYS[2] lease
-- ARGV[1] envelope, ARGV[2] value TTL (ms), ARGV[3] channel,
-- ARGV[4] '1' to announce on ARGV[3] with SPUBLISH (sharded pub/sub on a
-- Cluster), ARGV[5] the largest envelope a notification carries (bytes).
-- Returns 1 when a compute in flight lost its lease.
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local taken = redis.call('DEL', KEYS[2])
redis.call(ARGV[4] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[3], #ARGV[1] <= tonumber(ARGV[5]) and ARGV[1] or 'set')
return taken
