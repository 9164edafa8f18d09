-- server_run returns this server's run_id and uptime in seconds, from
-- INFO server; '' and -1 where scripts may not call INFO (restarts then go
-- unnoticed). A run_id is new for every start of the server process.
local function server_run()
  local info = redis.pcall('INFO', 'server')
  if type(info) ~= 'string' then
    return '', -1
  end
  return string.match(info, 'run_id:(%x+)') or '', tonumber(string.match(info, 'uptime_in_seconds:(%d+)') or '-1')
end
