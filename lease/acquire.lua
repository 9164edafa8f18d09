-- KEYS[1] lease key, KEYS[2] fence key
-- ARGV[1] token, ARGV[2] lease TTL (ms), ARGV[3] fence key TTL (ms)
-- Returns {fence, 0} when acquired, {0, remaining ms of the holder's lease} when busy.
-- The fence is max(previous + 1, the server's clock in microseconds): it
-- rises on every acquisition like a counter, and it also rises past every
-- fence handed out before a failover to a replica that missed the latest
-- ones (or a restart that lost them), so two holders never share a fence.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('TIME')
  local fence = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, t[1] * 1000000 + t[2])
  -- %.0f: a Lua number would be sent as 1.7e+15, losing digits.
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
  return {fence, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
