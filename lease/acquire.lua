-- KEYS[1] lease key, KEYS[2] fence key
-- ARGV[1] token, ARGV[2] lease TTL (ms), ARGV[3] fence key TTL (ms)
-- Returns {fence, 0} when acquired, {0, remaining ms of the holder's lease} when busy.
-- next_fence is internal/fencelua's, prepended.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {next_fence(KEYS[2], ARGV[3]), 0}
end
return {0, redis.call('PTTL', KEYS[1])}
