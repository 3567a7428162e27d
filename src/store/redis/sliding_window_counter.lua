-- A sliding window counter: the decision of
-- src/algorithms/sliding_window_counter.rs, windows aligned to Unix time on
-- the server's clock.
--
-- KEYS[1]  hash: i (the current window's index), cur (its count),
--          prev (the previous window's count), nb (no grant before, µs),
--          cl (the window of the last reset: a ticket up to it gives
--          nothing back)
-- ARGV     op, max, window (µs), then the op's arguments
-- Returns  an array of integers; times are durations from now (µs).
-- Needs    status.lua before it (the 'status' operation).
local key = KEYS[1]
local op = ARGV[1]
local max, window = tonumber(ARGV[2]), tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local stored = redis.call('HMGET', key, 'i', 'cur', 'prev', 'nb', 'cl')
local index = tonumber(stored[1]) or 0
local cur, prev, nb = tonumber(stored[2]) or 0, tonumber(stored[3]) or 0, tonumber(stored[4]) or 0
local cleared = tonumber(stored[5])

-- The counts as of window `at_index`: (current, previous).
-- Counts more than one window ahead were counted in windows of another
-- length (the window grew) and count nothing here.
local function counts_at(at_index)
  local gap = at_index - index
  if gap < -1 then return 0, 0 end
  if gap <= 0 then return cur, prev end
  if gap == 1 then return 0, cur end
  return 0, 0
end

-- How far into a window `previous` weighs little enough to leave `room`.
local function offset_for(previous, room)
  if previous <= room then return 0 end
  return window - math.floor(room * window / previous)
end

-- When `cost` could be granted, if not now.
local function blocked_until(cost)
  local from = math.max(now, nb)
  local at_index = math.floor(from / window)
  local current, previous = counts_at(at_index)
  local at
  if current + cost <= max then
    at = math.max(from, at_index * window + offset_for(previous, max - current - cost))
  else
    at = (at_index + 1) * window + offset_for(current, max - cost)
  end
  if at > now then return at end
  return nil
end

local function save()
  redis.call('HSET', key, 'i', index, 'cur', cur, 'prev', prev)
  local ttl = math.max((math.max(index, cleared or 0) + 2) * window, nb) - now
  redis.call('PEXPIRE', key, math.ceil(ttl / 1000) + 1000)
end

-- Rolls the counts forward to now.
local function roll()
  local current = math.floor(now / window)
  cur, prev = counts_at(current)
  if current < index - 1 then index = current else index = math.max(index, current) end
  return current
end

-- Moves the `from` units counted in window `at_index` to `to`. A grant from
-- before a reset (at or before its window) cannot be told from those since:
-- only its extra units are charged.
local function recount(at_index, from, to)
  local current = roll()
  if cleared and at_index <= cleared then
    at_index, from, to = current, 0, math.max(to - from, 0)
  end
  if at_index == current then
    cur = math.max(cur - from, 0) + to
  elseif at_index + 1 == current then
    prev = math.max(prev - from, 0) + to
  elseif to > from then
    cur = cur + to - from
  else
    return
  end
  save()
end

if op == 'acquire' or op == 'peek' then
  local cost = tonumber(ARGV[4])
  local at = blocked_until(cost)
  if at then return {0, at - now} end
  if op == 'peek' then return {1, 0} end
  local current = roll()
  cur = cur + cost
  save()
  return {1, current}
elseif op == 'status' then
  return status(max, blocked_until, now)
elseif op == 'take' then
  local current = math.floor(now / window)
  recount(current, 0, 1)
  return {1, current}
elseif op == 'adjust' then
  local ticket = tonumber(ARGV[4])
  recount(ticket, tonumber(ARGV[5]), tonumber(ARGV[6]))
  return {1, ticket}
elseif op == 'pause' then
  nb = math.max(nb, now + tonumber(ARGV[4]))
  redis.call('HSET', key, 'nb', nb)
  redis.call('PEXPIRE', key, math.ceil((nb - now) / 1000) + 1000 + 2 * math.ceil(window / 1000))
  return {1}
elseif op == 'reset' then
  cleared = math.max(math.floor(now / window), cleared or 0)
  redis.call('DEL', key)
  redis.call('HSET', key, 'cl', cleared)
  redis.call('PEXPIRE', key, math.ceil(((cleared + 2) * window - now) / 1000) + 1000)
  return {1}
end
return redis.error_reply('unknown sliding window counter operation ' .. tostring(op))
