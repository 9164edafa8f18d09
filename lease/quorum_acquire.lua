-- Round one of a Redlock quorum acquisition, on one server.
-- KEYS[1] lease key, KEYS[2] fence key, KEYS[3] the attempt's tombstone,
-- KEYS[4] the run key (the run_id of this server when it last took a
-- fence write-back on the name); ARGV[1] the attempt's token, ARGV[2]
-- lease TTL (ms), ARGV[3] restart quarantine (ms, 0: off).
-- Returns {1, fence floor, flags, uptime s, run_id} when the lease was free
-- and is now ours, read in the same atomic step, and {0, remaining ms of
-- the holder's lease, flags, uptime s, run_id} when busy. flags: 1 = this server
-- restarted less than the quarantine ago and has taken no fence write-back
-- on the name since (it may have lost a lease that is still valid);
-- 2 = this server knows the name (its fence or run key is there).
-- A grant that arrives after its attempt gave up finds the tombstone that
-- the attempt's release left (quorum_abandon.lua) and takes nothing.
-- The fence is not moved here: round two writes it back (quorum_fence.lua).
-- fence_floor is internal/fencelua's, server_run quorum_server.lua's,
-- prepended.
local run, up = server_run()
local flags = 0
local quarantine = tonumber(ARGV[3])
-- uptime_in_seconds is the difference of two whole-second clock readings,
-- up to a second more than the time since the start: less one, it is
-- never more.
if quarantine > 0 and up >= 0 and (up - 1) * 1000 < quarantine and redis.call('GET', KEYS[4]) ~= run then
  flags = 1
end
if redis.call('EXISTS', KEYS[2], KEYS[4]) > 0 then
  flags = flags + 2
end
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, fence_floor(KEYS[2]), flags, up, run}
end
return {0, redis.call('PTTL', KEYS[1]), flags, up, run}
