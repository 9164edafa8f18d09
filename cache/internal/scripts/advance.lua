-- advance moves the namespace's invalidation counter G (field 'g' of the
-- hash at key) on and returns its new value: max(G + step, floor + step,
-- the server's clock in microseconds). step 1 is an invalidation's tick;
-- step 0 restores a counter found below floor, the highest generation the
-- calling process has seen. Never lower: a write of G is a max, so
-- concurrent or stale writers cannot undo one another. The clock term
-- takes a counter Redis lost (a restart without persistence, a failover
-- to a replica that missed it) past every generation handed out before
-- the loss; see marks.go, "Across a loss of Redis's data".
local function advance(key, floor, step)
  local t = redis.call('TIME')
  local g = tonumber(redis.call('HGET', key, 'g') or '0')
  local new = math.max(g + step, floor + step, t[1] * 1000000 + t[2])
  if new > g then
    -- %.0f: a Lua number would be sent as 1.7e+15, losing digits.
    redis.call('HSET', key, 'g', string.format('%.0f', new))
  end
  return new
end
