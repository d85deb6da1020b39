-- tollgate: one decision's arguments. RedisStore puts this file after prelude.lua in front
-- of each algorithm's script (and at the top of each algorithm's function in the stacked
-- script), so every algorithm reads its ARGV, and the clock, the same way, written once. Plain
-- statements, not a function: Lua would build a function anew on every call.
--
-- KEYS[1]  the client's state key
-- ARGV[1]  L, the limit per period          ARGV[2]  P, the period in µs
-- ARGV[3]  B, burst (the bucket capacity)   ARGV[4]  T, µs per token (ceil(P / L))
-- ARGV[5]  cost, >= 0 (0: a look, in a dry run)  ARGV[6]  now in µs since the Unix epoch, or "" to
--                                                    read the server's clock
-- Each algorithm reads the ones it needs. ARGV is read with `+ 0` (the store sends plain
-- decimals), which is cheaper than tonumber; see prelude.lua for what things cost.

local key = KEYS[1]
local limit = ARGV[1] + 0
local period = ARGV[2] + 0
local burst = ARGV[3] + 0
local t = ARGV[4] + 0
local cost = ARGV[5] + 0
if period < 1 then
  period = 1
end
if t < 1 then
  t = 1
end
if cost < 0 then
  cost = 0
end
local now = ARGV[6]
if now == '' then
  local time = redis.call('TIME')
  now = time[1] * 1000000 + time[2]
else
  now = now + 0
end
