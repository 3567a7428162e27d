-- Leased concurrency slots: each lease expires unless its holder renews it.
--
-- KEYS[1]  sorted set of leases: member = lease name, score = expiry (µs)
-- KEYS[2]  string: no lease granted before this (µs), expiring with it
-- ARGV     op, then the op's arguments; lease names are decimal strings
-- Returns  an array of integers; times are durations from now (µs).
local leases, pause = KEYS[1], KEYS[2]
local op = ARGV[1]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local function paused_until()
  local at = tonumber(redis.call('GET', pause) or nil)
  if at and at > now then return at end
  return nil
end

local function keep(ttl)
  redis.call('PEXPIRE', leases, math.ceil(ttl / 1000) * 2 + 1000)
end

if op == 'lease' then
  local max, ttl, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local paused = paused_until()
  if paused then return {0, paused - now} end
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  if redis.call('ZCARD', leases) + cost > max then
    local earliest = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
    return {0, tonumber(earliest[2]) - now}
  end
  for k = 5, #ARGV do redis.call('ZADD', leases, now + ttl, ARGV[k]) end
  keep(ttl)
  return {1}
elseif op == 'renew' then
  local ttl = tonumber(ARGV[2])
  local renewed = 0
  for k = 3, #ARGV do
    local expiry = tonumber(redis.call('ZSCORE', leases, ARGV[k]) or nil)
    if expiry and expiry > now then
      redis.call('ZADD', leases, now + ttl, ARGV[k])
      renewed = renewed + 1
    end
  end
  keep(ttl)
  return {renewed}
elseif op == 'release' then
  for k = 2, #ARGV do redis.call('ZREM', leases, ARGV[k]) end
  return {1}
elseif op == 'held' then
  return {redis.call('ZCOUNT', leases, '(' .. now, '+inf')}
elseif op == 'pause' then
  local at = math.max(paused_until() or 0, now + tonumber(ARGV[2]))
  redis.call('SET', pause, at, 'PX', math.ceil((at - now) / 1000) + 1)
  return {1}
elseif op == 'paused' then
  local at = paused_until()
  if at then return {1, at - now} end
  return {0}
elseif op == 'clear' then
  redis.call('DEL', leases, pause)
  return {1}
end
return redis.error_reply('unknown lease operation ' .. tostring(op))
