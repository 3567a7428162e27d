-- GCRA, which is also the token bucket, on a line of slots with the gaps
-- refunds leave: the decision of src/algorithms/slots.rs (and
-- src/store/quota_state.rs), on the server's clock (tests/golden_vectors.rs
-- checks that both answer alike).
--
-- KEYS[1]  hash: tat (the line's end, µs, fractional), nb (no grant
--          before, µs), cut (the interval the slots were cut with), ret
--          (slots ending at or before it were cut with another interval, or
--          held before a reset: not given back), free (the gaps' time, as
--          of the last change)
-- KEYS[2]  sorted set: the gaps, time of the line no grant holds, each
--          "start end" (µs) scored by its start
-- ARGV     op, interval T (µs, fractional), burst B, then the op's arguments;
--          'pace' is 'acquire' for a quota with the pacing tolerance
-- Returns  an array of integers; times are durations from now (µs). A
--          grant's ticket is its slot's end in quarters of a µs: a double
--          of Unix µs (2^50 and up, since 2005) steps by a quarter or more,
--          so the ticket is exact.
-- Needs    status.lua before it (the 'status' operation).
local key, gaps = KEYS[1], KEYS[2]
local op = ARGV[1]
local interval, burst = tonumber(ARGV[2]), tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local span = interval * burst
local stored = redis.call('HMGET', key, 'tat', 'nb', 'cut', 'ret', 'free')
local tat, nb = tonumber(stored[1]) or 0, tonumber(stored[2]) or 0
local cut, retuned = tonumber(stored[3]) or interval, tonumber(stored[4]) or 0
local free = tonumber(stored[5]) or 0
local MAX_GAPS = 1024

-- Slots cut with another interval are not given back: their length is not
-- known.
if cut ~= interval then
  retuned, free = math.max(retuned, tat), 0
  -- The line's lead over now, rescaled: the cells spent stay spent.
  if tat > now then tat = now + (tat - now) * interval / cut end
  cut = interval
  redis.call('DEL', gaps)
  if stored[1] then redis.call('HSET', key, 'tat', tat, 'cut', cut, 'ret', retuned, 'free', free) end
end

-- A bound of a score range that leaves `at` out (exact: `..` would round).
local function below(at)
  return '(' .. string.format('%.17g', at)
end

local function gap(member)
  local start, finish = string.match(member, '(%S+) (%S+)')
  return tonumber(start), tonumber(finish)
end

local function add_gap(start, finish)
  redis.call('ZADD', gaps, start, string.format('%.17g %.17g', start, finish))
  free = free + finish - start
end

local function remove_gap(member)
  local start, finish = gap(member)
  redis.call('ZREM', gaps, member)
  free = free - (finish - start)
end

-- The gaps that start at or before `at`, in order.
local function started(at)
  return redis.call('ZRANGEBYSCORE', gaps, '-inf', at)
end

-- The time of the gaps ahead of now.
local function free_ahead()
  local passed = 0
  for _, member in ipairs(started(now)) do
    local start, finish = gap(member)
    passed = passed + math.min(finish, now) - start
  end
  return free - passed
end

-- Forgets the time of the gaps now passed.
local function pass()
  for _, member in ipairs(started(now)) do
    local start, finish = gap(member)
    remove_gap(member)
    if finish > now then add_gap(now, finish) end
  end
end

-- The time grants hold ahead of now: the line less its gaps.
local function held()
  return math.max(math.max(tat - now, 0) - free_ahead(), 0)
end

-- The first instant from now on at which at most `room` is held: held time
-- runs out as now passes it, not while now passes a gap.
local function held_at_most(room)
  local excess = held() - room
  if excess <= 0 then return now end
  local at = now
  for _, member in ipairs(redis.call('ZRANGE', gaps, 0, -1)) do
    local start, finish = gap(member)
    start, finish = math.max(start, at), math.max(finish, at)
    local before = start - at
    if before >= excess then break end
    excess = excess - before
    at = finish
  end
  return at + excess
end

-- When a grant of `cost` conforms.
local function ready_at(cost)
  return math.max(held_at_most(span - interval * cost), nb)
end

-- Where a paced grant at the end of the line starts (src/clock.rs
-- paced_from): the line's end if now has not passed it; if now is at most
-- 10 ms past it (a waiter woken late), up to the pacing tolerance (2 ms)
-- before now; else now.
local function paced_from()
  local late = now - tat
  if late <= 0 then return tat end
  if late <= 10000 and tat > 0 then return now - math.min(late, 2000) end
  return now
end

-- A slot of `weight`: the first gap if it fits, else the end of the line,
-- from `from`. Its end.
local function take(weight, from)
  if weight == 0 then return math.max(tat, now) end
  local first = redis.call('ZRANGE', gaps, 0, 0)[1]
  if first then
    local start, finish = gap(first)
    if finish - start >= weight then
      remove_gap(first)
      if start + weight < finish then add_gap(start + weight, finish) end
      return start + weight
    end
  end
  tat = from + weight
  return tat
end

-- Adds the gap [start, finish), joined to a gap it touches; the first gap
-- is forgotten past MAX_GAPS.
local function insert_gap(start, finish)
  local before = redis.call('ZREVRANGEBYSCORE', gaps, below(start), '-inf', 'LIMIT', 0, 1)[1]
  if before then
    local before_start, before_finish = gap(before)
    if before_finish == start then
      remove_gap(before)
      start = before_start
    end
  end
  local after = redis.call('ZRANGEBYSCORE', gaps, finish, finish)[1]
  if after then
    local _, after_finish = gap(after)
    remove_gap(after)
    finish = after_finish
  end
  add_gap(start, finish)
  if redis.call('ZCARD', gaps) > MAX_GAPS then
    remove_gap(redis.call('ZRANGE', gaps, 0, 0)[1])
  end
end

-- Frees what is ahead of now of the last `weight` of the slot ending at
-- `finish`; false if the line does not hold that time.
local function give_back(finish, weight)
  local start = math.max(finish - weight, now)
  if finish > tat then return false end
  -- Of the gaps, only the last one starting before `finish` can overlap.
  local last = redis.call('ZREVRANGEBYSCORE', gaps, below(finish), '-inf', 'LIMIT', 0, 1)[1]
  if last then
    local _, last_finish = gap(last)
    if last_finish > start then return false end
  end
  if finish <= start then return true end
  if finish == tat then
    tat = start
    local final = redis.call('ZRANGE', gaps, -1, -1)[1]
    while final do
      local final_start, final_finish = gap(final)
      if final_finish ~= tat then break end
      remove_gap(final)
      tat = final_start
      final = redis.call('ZRANGE', gaps, -1, -1)[1]
    end
  else
    insert_gap(start, finish)
  end
  return true
end

-- The state matters until the line's end plus a whole burst has passed: a
-- settle charges extra cells on top of it (up to the burst), which can bring
-- an old TAT back ahead of now; and until the end of a line a reset emptied
-- (`ret`): a grant from before the reset gives nothing back.
local function expire()
  local ttl = math.ceil(math.max(math.max(tat + span, nb, retuned) - now, 0) / 1000) + 1000
  redis.call('PEXPIRE', key, ttl)
  redis.call('PEXPIRE', gaps, ttl)
end

local function save()
  redis.call('HSET', key, 'tat', tat, 'cut', cut, 'ret', retuned, 'free', free)
  expire()
end

if op == 'acquire' or op == 'pace' or op == 'peek' then
  local cost = tonumber(ARGV[4])
  local ready = ready_at(cost)
  if ready > now then return {0, math.ceil(ready - now)} end
  if op == 'peek' then return {1, 0} end
  pass()
  local from = math.max(tat, now)
  if op == 'pace' then from = paced_from() end
  local finish = take(interval * cost, from)
  save()
  return {1, finish * 4}
elseif op == 'status' then
  return status(burst, function(cost)
    local ready = ready_at(cost)
    if ready > now then return ready end
    return nil
  end, now)
elseif op == 'take' then
  pass()
  local finish = take(interval, math.max(tat, now))
  save()
  return {1, finish * 4}
elseif op == 'adjust' then
  local finish, from, to = tonumber(ARGV[4]) / 4, tonumber(ARGV[5]), tonumber(ARGV[6])
  pass()
  local cut_before = finish <= retuned
  local weight = interval * math.abs(from - to)
  if to > from then
    -- Extra cells are always charged: the grant's slot grows if it ends the
    -- line, else the line grows by a slot of its own.
    local grows = finish == tat and finish > now
    tat = math.max(tat, now) + weight
    save()
    if grows and not cut_before then return {1, tat * 4} end
    return {0}
  end
  if cut_before or not give_back(finish, weight) then
    save()
    return {0}
  end
  save()
  return {1, (finish - weight) * 4}
elseif op == 'pause' then
  nb = math.max(nb, now + tonumber(ARGV[4]))
  redis.call('HSET', key, 'nb', nb)
  expire()
  return {1}
elseif op == 'reset' then
  -- An empty line and no pause, but the old line's slots (ending at or
  -- before its end) are not given back: grants made since may hold their
  -- time.
  tat, nb, free, retuned = 0, 0, 0, math.max(retuned, tat)
  redis.call('DEL', key, gaps)
  save()
  return {1}
end
return redis.error_reply('unknown GCRA operation ' .. tostring(op))
