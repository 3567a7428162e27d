-- The sliding log of a RateLimiter, with the seed's backoff: the same
-- rules as MemoryStore's SlidingLog, on the server's clock.
--
-- KEYS[1]  sorted set of starts: score = start time (µs), member = sequence
-- KEYS[2]  hash: nb (no start before, µs), bo (current backoff, µs),
--          seq (last member), esc/esc_nb/esc_bo (what the last backoff replaced),
--          cl (the last reset, µs: a start at or before it gives nothing back)
-- ARGV     op, max, window (µs), initial backoff (µs, 0 = none),
--          multiplier, max backoff (µs), then the op's own arguments
-- Returns  an array of integers; times are durations from now (µs).
-- Needs    status.lua before it (the 'status' operation).
local log, state = KEYS[1], KEYS[2]
local op = ARGV[1]
local max, window = tonumber(ARGV[2]), tonumber(ARGV[3])
local initial, multiplier, cap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local function field(name)
  return tonumber(redis.call('HGET', state, name) or nil)
end

-- Drops the starts that left the window (now - window, now].
local function prune()
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
end

-- When the window has room for `cost` more starts, if it has not now.
local function frees_at(cost)
  local room = math.max(max - cost, 0)
  local index = redis.call('ZCARD', log) - room - 1
  if index < 0 then return nil end
  local at = tonumber(redis.call('ZRANGE', log, index, index, 'WITHSCORES')[2]) + window
  if at > now then return at end
  return nil
end

-- When `cost` starts could be granted, if not now: the later of the pause
-- and the full window freeing a place.
local function blocked_until(cost)
  local nb = field('nb') or 0
  local paused = nil
  if nb > now then paused = nb end
  local full = frees_at(cost)
  if paused and full then return math.max(paused, full) end
  return paused or full
end

local function expire()
  local ttl = math.max(window, (field('nb') or 0) - now)
  local ms = math.ceil(ttl / 1000) + 1000
  redis.call('PEXPIRE', log, ms)
  redis.call('PEXPIRE', state, ms)
end

-- Adds `count` starts at `at`, in batches that fit Lua's stack.
local function add(at, count)
  local last = redis.call('HINCRBY', state, 'seq', count)
  local first = last - count + 1
  while first <= last do
    local batch = {}
    for member = first, math.min(first + 499, last) do
      batch[#batch + 1] = at
      batch[#batch + 1] = member
    end
    redis.call('ZADD', log, unpack(batch))
    first = first + 500
  end
end

-- Erases `count` starts recorded at `at`.
local function erase(at, count)
  local members = redis.call('ZRANGEBYSCORE', log, at, at, 'LIMIT', 0, count)
  for first = 1, #members, 500 do
    redis.call('ZREM', log, unpack(members, first, math.min(first + 499, #members)))
  end
end

-- The backoff for a start that filled the window freeing at `at`.
local function escalate(at, jitter)
  local nb, bo = field('nb') or 0, field('bo')
  redis.call('HSET', state, 'esc', 1, 'esc_nb', nb, 'esc_bo', bo or -1)
  local delay = math.min(math.floor((bo or initial) * multiplier), cap)
  local ends = now + delay + math.floor(delay * jitter)
  redis.call('HSET', state, 'bo', delay, 'nb', math.max(nb, ends, at))
end

-- Records `cost` starts now; backs off if that fills the window.
local function record(cost, jitter)
  add(now, cost)
  if initial > 0 then
    local at = frees_at(1)
    if at then escalate(at, jitter) end
  end
  expire()
end

if op == 'acquire' then
  local cost, jitter = tonumber(ARGV[7]), tonumber(ARGV[8])
  prune()
  local at = blocked_until(cost)
  if at then return {0, at - now} end
  redis.call('HDEL', state, 'bo')
  record(cost, jitter)
  return {1, now}
elseif op == 'record' then
  prune()
  record(1, tonumber(ARGV[7]))
  return {1}
elseif op == 'refund' then
  local cleared = field('cl')
  if cleared and tonumber(ARGV[7]) <= cleared then return {1} end
  erase(tonumber(ARGV[7]), tonumber(ARGV[8]))
  prune()
  if not frees_at(1) and field('esc') then
    local nb, bo = field('esc_nb'), field('esc_bo')
    redis.call('HSET', state, 'nb', nb)
    if bo < 0 then redis.call('HDEL', state, 'bo') else redis.call('HSET', state, 'bo', bo) end
    redis.call('HDEL', state, 'esc', 'esc_nb', 'esc_bo')
  end
  return {1}
elseif op == 'settle' then
  local ticket, from, to = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
  local cleared = field('cl')
  if to < from and cleared and ticket <= cleared then return {1} end
  if to < from then erase(ticket, from - to) else add(ticket, to - from) end
  expire()
  return {1}
elseif op == 'peek' then
  local at = blocked_until(tonumber(ARGV[7]))
  if at then return {0, at - now} end
  return {1, 0}
elseif op == 'status' then
  return status(max, blocked_until, now)
elseif op == 'count' then
  return {redis.call('ZCOUNT', log, '(' .. (now - tonumber(ARGV[7])), '+inf')}
elseif op == 'oldest' then
  local found = redis.call('ZRANGEBYSCORE', log, '(' .. (now - tonumber(ARGV[7])), '+inf',
    'WITHSCORES', 'LIMIT', tonumber(ARGV[8]), 1)
  if #found == 0 then return {0} end
  return {1, now - tonumber(found[2])}
elseif op == 'next' then
  local nb = field('nb') or 0
  if nb > now then return {1, nb - now} end
  return {0}
elseif op == 'pause' then
  local nb = math.max(field('nb') or 0, now + tonumber(ARGV[7]))
  redis.call('HSET', state, 'nb', nb)
  redis.call('HDEL', state, 'esc', 'esc_nb', 'esc_bo')
  expire()
  return {1}
elseif op == 'clear' then
  -- Kept while a start made now counts: the starts from before (at or
  -- before now) cannot be told from those made since at the same instant.
  local cleared = math.max(now, field('cl') or 0)
  redis.call('DEL', log, state)
  redis.call('HSET', state, 'cl', cleared)
  expire()
  return {1}
end
return redis.error_reply('unknown sliding log operation ' .. tostring(op))
