-- A fixed window counter: the decision of src/algorithms/fixed_window.rs,
-- windows aligned to Unix time on the server's clock.
--
-- KEYS[1]  hash: i (the counted window's index), c (its count),
--          nb (no grant before, µs), cl (the window of the last reset: a
--          ticket up to it gives nothing back)
-- ARGV     op, max, window (µs), then the op's arguments
-- Returns  an array of integers; times are durations from now (µs).
-- Needs    status.lua before it (the 'status' operation).
local key = KEYS[1]
local op = ARGV[1]
local max, window = tonumber(ARGV[2]), tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local stored = redis.call('HMGET', key, 'i', 'c', 'nb', 'cl')
local index, count, nb = tonumber(stored[1]) or -1, tonumber(stored[2]) or 0, tonumber(stored[3]) or 0
local cleared = tonumber(stored[4])

local function count_in(at_index)
  if index == at_index then return count end
  return 0
end

-- When `cost` could be granted, if not now.
local function blocked_until(cost)
  local from = math.max(now, nb)
  local at_index = math.floor(from / window)
  local at = from
  if count_in(at_index) + cost > max then at = (at_index + 1) * window end
  if at > now then return at end
  return nil
end

local function save(new_index, new_count)
  index, count = new_index, new_count
  redis.call('HSET', key, 'i', index, 'c', count)
  local ttl = math.max((math.max(index, cleared or -1) + 1) * window, nb) - now
  redis.call('PEXPIRE', key, math.ceil(ttl / 1000) + 1000)
end

-- Moves the `from` units counted in window `at_index` to `to`. A grant from
-- before a reset (at or before its window) cannot be told from those since:
-- only its extra units are charged.
local function recount(at_index, from, to)
  local current = math.floor(now / window)
  if cleared and at_index <= cleared then
    at_index, from, to = current, 0, math.max(to - from, 0)
  end
  local counted = count_in(current)
  if at_index == current then
    counted = math.max(counted - from, 0) + to
  elseif to > from then
    counted = counted + to - from
  else
    return
  end
  save(current, counted)
end

if op == 'acquire' or op == 'peek' then
  local cost = tonumber(ARGV[4])
  local at = blocked_until(cost)
  if at then return {0, at - now} end
  if op == 'peek' then return {1, 0} end
  local current = math.floor(now / window)
  save(current, count_in(current) + cost)
  return {1, current}
elseif op == 'status' then
  return status(max, blocked_until, now)
elseif op == 'take' then
  recount(math.floor(now / window), 0, 1)
  return {1, index}
elseif op == 'adjust' then
  local ticket = tonumber(ARGV[4])
  recount(ticket, tonumber(ARGV[5]), tonumber(ARGV[6]))
  return {1, ticket}
elseif op == 'pause' then
  nb = math.max(nb, now + tonumber(ARGV[4]))
  redis.call('HSET', key, 'nb', nb)
  redis.call('PEXPIRE', key, math.ceil((nb - now) / 1000) + 1000 + math.ceil(window / 1000))
  return {1}
elseif op == 'reset' then
  cleared = math.max(math.floor(now / window), cleared or 0)
  redis.call('DEL', key)
  redis.call('HSET', key, 'cl', cleared)
  redis.call('PEXPIRE', key, math.ceil(((cleared + 1) * window - now) / 1000) + 1000)
  return {1}
end
return redis.error_reply('unknown fixed window operation ' .. tostring(op))
