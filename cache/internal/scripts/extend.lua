-- Extend a claim's lease while its holder computes, if it is still the
-- holder's.
-- KEYS[1] lease; ARGV[1] token, ARGV[2] lease TTL (ms). Returns 1 when
-- extended, 0 when the lease is gone or another holder's (expired, taken
-- away by a Set or Delete, lost in a failover).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
