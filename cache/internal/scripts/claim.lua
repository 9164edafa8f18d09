-- Claim a key for computing, and re-read its value in the same step: the
-- claim is the lease {ns:k}:l holding the claimer's random token for the
-- lease TTL; it exists only while a compute runs.
-- KEYS[1] value, KEYS[2] lease; ARGV[1] token, ARGV[2] lease TTL (ms)
-- Returns {1, envelope or false} when claimed: the value as it is now (the
-- previous holder may have filled since the caller's read; a key of another
-- Redis type reads as ''), or {0, remaining ms of the holder's lease} when
-- another holder has it. A claim run again with its token (its reply was
-- lost on a broken connection, and go-redis or the budget ran it again) is
-- claimed: the lease is the caller's own.
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) or redis.pcall('GET', KEYS[2]) == ARGV[1] then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'table' then
    v = ''
  end
  return {1, v}
end
return {0, redis.call('PTTL', KEYS[2])}
