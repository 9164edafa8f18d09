-- Clear a namespace: raise its invalidation counter and its own mark to
-- the new value in one step, and announce it to every replica.
-- KEYS[1] the namespace's counter and mark {ns}:inv (a hash: 'g' the
-- counter, 'h' hard mark, 's' soft mark)
-- ARGV[1] field ('h' or 's'), ARGV[2] the invalidation channel, ARGV[3]
-- the announcement's prefix (the generation and "*" are appended)
-- Returns the new generation.
local gen = redis.call('HINCRBY', KEYS[1], 'g', 1)
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if gen > cur then
  redis.call('HSET', KEYS[1], ARGV[1], gen)
end
redis.call('PUBLISH', ARGV[2], ARGV[3] .. gen .. ' *')
return gen
