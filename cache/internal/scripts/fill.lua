-- Store a computed value, but only while the writer still holds its lease
-- (compare-and-set on its own random token): a lease that expired, was lost
-- in a failover, or was taken away by a Set or Delete rejects the fill, as
-- does another holder's lease. Release the lease; announce the fill on the
-- key's channel, with the envelope itself when it is at most ARGV[6] bytes
-- (the waiters then need no GET), else 'large': the L1 of every replica
-- that tracks the key hears it there too, as of Set and Delete, so that
-- none keeps serving the value this fill replaced.
-- KEYS[1] value, KEYS[2] lease
-- ARGV[1] envelope, ARGV[2] value TTL (ms), ARGV[3] token, ARGV[4] channel,
-- ARGV[5] '1' to announce with SPUBLISH (sharded pub/sub on a Cluster),
-- ARGV[6] the largest envelope a notification carries (bytes)
-- Returns {stored, other}: stored 1 when written; other 1 when the fill was
-- rejected because another holder has the lease now.
local publish = ARGV[5] == '1' and 'SPUBLISH' or 'PUBLISH'
local holder = redis.call('GET', KEYS[2])
if holder ~= ARGV[3] then
  redis.call(publish, ARGV[4], 'rejected')
  return {0, holder and 1 or 0}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
redis.call(publish, ARGV[4], #ARGV[1] <= tonumber(ARGV[6]) and ARGV[1] or 'large')
return {1, 0}
