-- Round two of a Redlock quorum acquisition, on one server: the write-back
-- of the fence. KEYS[1] lease key, KEYS[2] fence key; ARGV[1] token,
-- ARGV[2] fence, ARGV[3] fence key TTL (ms).
-- Only where the lease is still this holder's does the fence key move on,
-- and never down. Returns 1 when written, 0 when the lease is not ours here.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
local fence = math.max(cur, tonumber(ARGV[2]))
redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
return 1
