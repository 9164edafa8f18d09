-- Write a computed value, but only while no newer lease, Set or Delete
-- happened since the writer acquired its lease (the fence still matches);
-- release the writer's lease; announce the fill.
-- KEYS[1] value, KEYS[2] lease, KEYS[3] fence
-- ARGV[1] envelope, ARGV[2] value TTL (ms), ARGV[3] token, ARGV[4] fence, ARGV[5] channel,
-- ARGV[6] '1' to announce with SPUBLISH (sharded pub/sub on a Cluster)
-- Returns {stored, released}: stored 1 when written, 0 when fenced out;
-- released 1 when the writer's lease was still its own and was released.
local stored = 0
if tonumber(redis.call('GET', KEYS[3]) or '-1') == tonumber(ARGV[4]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  stored = 1
end
local released = 0
if redis.call('GET', KEYS[2]) == ARGV[3] then
  released = redis.call('DEL', KEYS[2])
end
redis.call(ARGV[6] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[5], stored)
return {stored, released}
