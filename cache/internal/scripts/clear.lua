-- Clear a namespace: move its invalidation counter on (advance.lua,
-- prepended) and raise its own mark to the new value in one step, and
-- announce it to every replica.
-- KEYS[1] the namespace's counter and mark {ns}:inv (a hash: 'g' the
-- counter, 'h' hard mark, 's' soft mark)
-- ARGV[1] field ('h' or 's'), ARGV[2] the invalidation channel, ARGV[3]
-- the announcement's prefix (the generation and "*" are appended), ARGV[4]
-- the caller's floor (see advance.lua)
-- Returns the new generation.
local gen = advance(KEYS[1], tonumber(ARGV[4]), 1)
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local s = string.format('%.0f', gen)
if gen > cur then
  redis.call('HSET', KEYS[1], ARGV[1], s)
end
redis.call('PUBLISH', ARGV[2], ARGV[3] .. s .. ' *')
return gen
