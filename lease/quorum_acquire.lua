-- Round one of a Redlock quorum acquisition, on one server.
-- KEYS[1] lease key, KEYS[2] fence key; ARGV[1] token, ARGV[2] lease TTL (ms).
-- Returns {1, fence floor} when the lease was free and is now ours, read in
-- the same atomic step, and {0, remaining ms of the holder's lease} when busy.
-- The fence is not moved here: round two writes it back (quorum_fence.lua).
-- fence_floor is internal/fencelua's, prepended.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, fence_floor(KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
