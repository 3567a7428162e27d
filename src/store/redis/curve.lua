-- A shared adaptive rate: a version and six whole numbers, written only
-- over the version they were computed from (compare-and-set).
--
-- KEYS[1]  hash: version, w1 .. w6
-- ARGV     'load', or 'swap' version w1 .. w6 ttl_ms
-- Returns  load: {version, w1 .. w6}, or {0} if none; swap: {1} if written
local curve, op = KEYS[1], ARGV[1]

if op == 'load' then
  local fields = redis.call('HMGET', curve, 'version', 'w1', 'w2', 'w3', 'w4', 'w5', 'w6')
  if not fields[1] then return {0} end
  local reply = {}
  for k = 1, 7 do reply[k] = tonumber(fields[k]) end
  return reply
elseif op == 'swap' then
  local current = tonumber(redis.call('HGET', curve, 'version') or '0')
  if current ~= tonumber(ARGV[2]) then return {0} end
  redis.call('HSET', curve, 'version', current + 1, 'w1', ARGV[3], 'w2', ARGV[4],
    'w3', ARGV[5], 'w4', ARGV[6], 'w5', ARGV[7], 'w6', ARGV[8])
  redis.call('PEXPIRE', curve, ARGV[9])
  return {1}
end
return redis.error_reply('unknown curve operation ' .. tostring(op))
