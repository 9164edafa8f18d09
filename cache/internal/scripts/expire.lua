-- Expire a value (soft): replace its envelope by ARGV[2], the same value
-- with its fresh and stale windows ended, keeping its TTL, or delete it when
-- ARGV[2] is empty; take the lease away, so a compute in flight cannot
-- write its now outdated result; announce it on the key's channel, to its
-- waiters and to the L1 of every replica that tracks the key. Only when the
-- value is still ARGV[1] (empty: none) as it was read.
-- KEYS[1] value, KEYS[2] lease; ARGV[1] envelope read, ARGV[2] new envelope,
-- ARGV[3] channel, ARGV[4] '1' to announce on ARGV[3] with SPUBLISH.
-- Returns -1 when the value changed since it was read (nothing done), 1
-- otherwise.
local cur = redis.call('GET', KEYS[1])
if (cur or '') ~= ARGV[1] then
  return -1
end
if cur then
  if ARGV[2] == '' then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  end
end
redis.call('DEL', KEYS[2])
redis.call(ARGV[4] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[3], 'delete')
return 1
