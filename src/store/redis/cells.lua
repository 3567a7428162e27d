-- GCRA, which is also the token bucket: the decision of
-- src/algorithms/gcra.rs, on the server's clock (tests/golden_vectors.rs
-- checks that both answer alike).
--
-- KEYS[1]  hash: tat (theoretical arrival time, µs), nb (no grant before,
--          µs), gen (bumped on every change of tat: a grant's ticket)
-- ARGV     op, interval T (µs, fractional), burst B, then the op's arguments
-- Returns  an array of integers; times are durations from now (µs).
-- Needs    status.lua before it (the 'status' operation).
local key = KEYS[1]
local op = ARGV[1]
local interval, burst = tonumber(ARGV[2]), tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local span = interval * burst
local stored = redis.call('HMGET', key, 'tat', 'nb', 'gen')
-- A key that expired (or never was) starts its gen at now, past every gen
-- of its earlier life: a ticket from before the expiry matches no later
-- grant, so it cannot give back units that grant took.
local tat, nb, gen = tonumber(stored[1]) or 0, tonumber(stored[2]) or 0, tonumber(stored[3]) or now

-- The GCRA test: the TAT a grant of `cost` leaves, or when it would conform.
local function judge(cost)
  local weight = interval * cost
  local ready = math.max(tat + weight - span, nb)
  if ready > now then return false, ready end
  return true, math.max(tat, now) + weight
end

-- The state matters until the TAT plus a whole burst has passed: a settle
-- charges extra cells on top of the TAT a grant left (up to the burst), which
-- can bring an old TAT back ahead of now.
local function expire()
  local ttl = math.max(tat + span, nb) - now
  redis.call('PEXPIRE', key, math.ceil(math.max(ttl, 0) / 1000) + 1000)
end

-- A grant's ticket stands while the TAT is where the grant left it, as the
-- in-memory Cells' token (the TAT itself) does: gen moves only with the TAT,
-- so a grant of cost 0 that leaves it in place voids no earlier ticket.
local function save(new_tat)
  new_tat = math.max(new_tat, 0)
  if new_tat ~= tat then gen = gen + 1 end
  tat = new_tat
  redis.call('HSET', key, 'tat', tat, 'gen', gen)
  expire()
end

if op == 'acquire' or op == 'peek' then
  local conforms, at = judge(tonumber(ARGV[4]))
  if not conforms then return {0, math.ceil(at - now)} end
  if op == 'peek' then return {1, 0} end
  save(at)
  return {1, gen}
elseif op == 'status' then
  return status(burst, function(cost)
    local conforms, at = judge(cost)
    if conforms then return nil end
    return at
  end, now)
elseif op == 'take' then
  save(math.max(tat, now) + interval)
  return {1, gen}
elseif op == 'adjust' then
  local ticket, from, to = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
  local matched = gen == ticket
  if to < from then
    -- Give back only if nothing moved the TAT since the grant.
    if not matched then return {0} end
    save(tat - interval * (from - to))
  else
    save(tat + interval * (to - from))
    if not matched then return {0} end
  end
  return {1, gen}
elseif op == 'pause' then
  nb = math.max(nb, now + tonumber(ARGV[4]))
  redis.call('HSET', key, 'nb', nb)
  expire()
  return {1}
elseif op == 'reset' then
  redis.call('DEL', key)
  return {1}
end
return redis.error_reply('unknown GCRA operation ' .. tostring(op))
