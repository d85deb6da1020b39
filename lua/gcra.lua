-- GCRA (generic cell rate algorithm): one decision, exactly as src/algorithm/gcra.rs makes it.
--
-- KEYS[1]  the client's state key. Value: the TAT (theoretical arrival time, µs) as a decimal
--          string; a missing key is a client with no history (a full bucket).
-- ARGV[1]  L: limit, requests per period (not needed here; every script takes the same ARGV)
-- ARGV[2]  P: period, µs (not needed here)
-- ARGV[3]  B: burst, the bucket capacity in requests
-- ARGV[4]  T: emission interval, µs (ceil(P / L))
-- ARGV[5]  cost, >= 1
-- ARGV[6]  now, µs since the Unix epoch, or "" to use the server clock (redis TIME)
-- ARGV[7]  optional: "1" for a dry run that decides exactly as usual but writes nothing (used
--          by lua/stacked.lua to decide stacked limits before consuming any); absent: writes.
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--          retry_after is -1 when allowed, and when cost > B (never allowed).
--
-- Calls: TIME (only when ARGV[6] is ""), one GET, and one SET ... PX on allow (not in a dry run).
-- A denial writes nothing. The TTL is ceil((TAT - now) / 1000) ms: the key lives exactly as
-- long as it decides differently from a new one.
--
-- By hand, 10/s with burst 20 (T = 100000 µs), cost 1, server time:
--   redis-cli EVAL "$(cat lua/gcra.lua)" 1 'tollgate:api:{10.0.0.1}' 10 1000000 20 100000 1 ''
--   redis-cli SCRIPT LOAD "$(cat lua/gcra.lua)"    # prints the sha, then:
--   redis-cli EVALSHA <sha> 1 'tollgate:api:{10.0.0.1}' 10 1000000 20 100000 1 ''
--
-- Numbers are Lua doubles: exact for integers up to 2^53, which covers now + B*T for any
-- sensible quota.

-- Kept lean on purpose (no closures, one string.format): Redis runs scripts one at a time, so
-- this script's server time is the limiter's ceiling.

local burst = tonumber(ARGV[3])
local t = tonumber(ARGV[4])
if t < 1 then t = 1 end
local cost = tonumber(ARGV[5])
if cost < 1 then cost = 1 end
local now
if ARGV[6] == '' then
  local time = redis.call('TIME')
  now = time[1] * 1000000 + time[2]
else
  now = tonumber(ARGV[6])
end

local capacity = burst * t
local tat = tonumber(redis.call('GET', KEYS[1])) or 0
-- max(tat, now) - now: the part of the bucket in use now.
local backlog = tat - now
if backlog < 0 then backlog = 0 end

if cost > burst then
  -- Never allowed. remaining = floor((capacity - backlog) / t): for integers below 2^53 the
  -- double division rounds to the exact floor or one above it; the check undoes the latter.
  local free = capacity - backlog
  if free < 0 then free = 0 end
  local remaining = math.floor(free / t)
  if remaining * t > free then remaining = remaining - 1 end
  return {0, remaining, backlog, -1}
end
-- new - now
local after = backlog + cost * t
if after > capacity then
  local free = capacity - backlog
  if free < 0 then free = 0 end
  local remaining = math.floor(free / t)
  if remaining * t > free then remaining = remaining - 1 end
  return {0, remaining, backlog, after - capacity}
end
local free = capacity - after
local remaining = math.floor(free / t)
if remaining * t > free then remaining = remaining - 1 end
if ARGV[7] ~= '1' then
  -- The TTL: ceil(after / 1000) ms, at least 1 (after >= t >= 1).
  redis.call('SET', KEYS[1], string.format('%.0f', now + after), 'PX', math.ceil(after / 1000))
end
return {1, remaining, after, -1}
