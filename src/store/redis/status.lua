-- Put before the quota and sliding log scripts: their 'status' operation,
-- one binary search over the script's own test, in one round trip.
--
-- status(capacity, blocked, now): how many units `blocked(cost)` (when
-- `cost` units could be granted, if not now) lets through now, at most
-- `capacity`, and the µs until one more would be: {remaining, µs}, or
-- {capacity, -1} when the whole capacity is free.
local function status(capacity, blocked, now)
  local at = blocked(capacity)
  if not at then return {capacity, -1} end
  local admitted, denied = 0, capacity
  while denied - admitted > 1 do
    local middle = math.floor((admitted + denied) / 2)
    local middle_at = blocked(middle)
    if middle_at then denied, at = middle, middle_at else admitted = middle end
  end
  return {admitted, math.ceil(at - now)}
end

