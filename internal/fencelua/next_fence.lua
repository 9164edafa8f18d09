-- next_fence moves a fence key on and returns the new fence:
-- max(previous + 1, the server's clock in microseconds). It rises on every
-- call like a counter, and it also rises past every fence handed out before
-- a failover to a replica that missed the latest ones (or a restart that
-- lost them), so two holders never share a fence.
local function next_fence(key, ttl_ms)
  local t = redis.call('TIME')
  local fence = math.max(tonumber(redis.call('GET', key) or '0') + 1, t[1] * 1000000 + t[2])
  -- %.0f: a Lua number would be sent as 1.7e+15, losing digits.
  redis.call('SET', key, string.format('%.0f', fence), 'PX', ttl_ms)
  return fence
end
