-- Raise one tag's mark to an invalidation's generation, never lowering it:
-- concurrent invalidations may arrive in any order.
-- KEYS[1] the tag's mark {ns:tag}:t (a hash: 'h' hard, 's' soft)
-- ARGV[1] field ('h' or 's'), ARGV[2] the generation
-- Returns the mark's value afterwards.
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local gen = tonumber(ARGV[2])
if gen > cur then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return gen
end
return cur
