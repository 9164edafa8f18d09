-- Delete a value and take the lease away, so a compute in flight cannot
-- write its now outdated result; announce it on the key's channel, to its
-- waiters and to the L1 of every replica that tracks the key.
-- KEYS[1] value, KEYS[2] lease; ARGV[1] channel, ARGV[2] '1' to announce on
-- ARGV[1] with SPUBLISH (sharded pub/sub on a Cluster).
-- Returns the number of values deleted.
local n = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
redis.call(ARGV[2] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[1], 'delete')
return n
