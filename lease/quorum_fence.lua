-- Round two of a Redlock quorum acquisition, on one server: the write-back
-- of the fence. KEYS[1] lease key, KEYS[2] fence key, KEYS[3] run key;
-- ARGV[1] token, ARGV[2] fence, ARGV[3] fence key TTL (ms), ARGV[4] the
-- server's run_id as the grant read it ('' if unknown).
-- Only where the lease is still this holder's does the fence key move on,
-- and never down; the run key then records the run_id: the server has taken
-- a fenced lease on the name since it last started (the token still being
-- there shows it did not restart since the grant read the run_id).
-- Returns 1 when written, 0 when the lease is not ours here.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
local fence = math.max(cur, tonumber(ARGV[2]))
redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[3])
end
return 1
