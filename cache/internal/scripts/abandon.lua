-- Give up a lease without a value (the compute failed) and wake the waiters
-- so one of them can take the lease.
-- KEYS[1] lease; ARGV[1] token, ARGV[2] channel, ARGV[3] '1' for SPUBLISH. Returns 1 when released.
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  released = redis.call('DEL', KEYS[1])
end
redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], 'abandon')
return released
