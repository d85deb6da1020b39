-- tollgate: plain counters (Policy::with_plain_counter) decided together, a refused request
-- consuming nothing: one MGET, then, unless a blocking counter would pass its limit, a SET ...
-- EX of each allowed one (its count plus the cost, kept one period: what INCRBY + EXPIRE
-- leave, in one call fewer; see plain_counter.lua). The store runs it for a request whose
-- checks are all plain counters of distinct keys on one Redis, none charged while over; any
-- other stacked decision runs the stacked script.
--
-- KEYS     the counters, distinct: each client key and its window's start in Unix seconds
-- ARGV[1]  now in µs (the instance's: the keys hold their windows)
-- then 4 values per counter i (ARGV[2 + 4*(i-1)] onwards): L, P in µs (whole seconds),
--          cost (>= 1), blocking (1: its denial refuses the request; 0: a shadow limit)
-- Reply:   a flat array of 4 integers per counter, in order: allowed (1/0), remaining,
--          reset_after_us, retry_after_us (-1 = none), as plain_counter.lua replies
--
-- Calls: MGET, then SET ... EX per counter that counts.

local n = #KEYS
if #ARGV ~= 1 + 4 * n then
  return redis.error_reply('tollgate plain counters: expected 1 + 4 * ' .. n .. ' arguments, got ' .. #ARGV)
end
local now = ARGV[1] + 0
local counts = redis.call('MGET', unpack(KEYS))
local flat, writes, blocked = {}, {}, false
for i = 1, n do
  local base = 2 + 4 * (i - 1)
  local limit, period, cost = ARGV[base] + 0, ARGV[base + 1] + 0, ARGV[base + 2] + 0
  local count = 0
  if counts[i] then
    count = tonumber(counts[i])
    if not count then
      rare().unreadable(KEYS[i])
    end
  end
  local window_end = now - now % period + period
  local at = #flat
  if count + cost <= limit then
    flat[at + 1], flat[at + 2], flat[at + 3], flat[at + 4] = 1, limit - count - cost, window_end - now, -1
    writes[#writes + 1] = {KEYS[i], count + cost, period}
  else
    local retry_after, reset_after, left = -1, 0, limit - count
    if cost <= limit then
      retry_after = window_end - now
    end
    if count > 0 then
      reset_after = window_end - now
    end
    if left < 0 then
      left = 0
    end
    flat[at + 1], flat[at + 2], flat[at + 3], flat[at + 4] = 0, left, reset_after, retry_after
    if ARGV[base + 3] == '1' then
      blocked = true
    end
  end
end
if not blocked then
  for _, w in ipairs(writes) do
    redis.call('SET', w[1], string.format('%d', w[2]), 'EX', string.format('%d', math.floor(w[3] / 1000000)))
  end
end
return flat
