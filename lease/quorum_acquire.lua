-- Round one of a Redlock quorum acquisition, on one server.
-- KEYS[1] lease key, KEYS[2] fence key, KEYS[3] the attempt's tombstone;
-- ARGV[1] the attempt's token, ARGV[2] lease TTL (ms).
-- Returns {1, fence floor} when the lease was free and is now ours, read in
-- the same atomic step, and {0, remaining ms of the holder's lease} when busy.
-- A grant that arrives after its attempt gave up finds the tombstone that
-- the attempt's release left (quorum_abandon.lua) and takes nothing.
-- The fence is not moved here: round two writes it back (quorum_fence.lua).
-- fence_floor is internal/fencelua's, prepended.
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, fence_floor(KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
