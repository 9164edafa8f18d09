-- KEYS[1] lease key; ARGV[1] token, ARGV[2] new TTL (ms). Returns 1 when extended, 0 when not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
