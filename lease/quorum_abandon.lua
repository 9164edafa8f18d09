-- The release of a quorum attempt or lease, on one server.
-- KEYS[1] lease key, KEYS[2] the attempt's tombstone; ARGV[1] the attempt's
-- token, ARGV[2] TTL (ms).
-- Where the lease is this token's, it is deleted: returns 1. Elsewhere
-- (returns 0) a tombstone for the token is left for a TTL, so that a grant
-- of this token that the network still holds takes nothing when it comes.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return 0
