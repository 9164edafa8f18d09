-- fence_floor returns the lowest fence a Redlock quorum may build on from
-- this server: max(the fence stored at key, the server's clock in
-- microseconds). The clock term keeps fences rising past a fence key that
-- expired or was lost in a restart, as next_fence's does.
local function fence_floor(key)
  local t = redis.call('TIME')
  return math.max(tonumber(redis.call('GET', key) or '0'), t[1] * 1000000 + t[2])
end
