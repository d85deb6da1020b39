-- Leaky bucket (a queue draining one slot every T): one decision, exactly as
-- src/algorithm/leaky_bucket.rs makes it.
--
-- A request of cost c takes c consecutive slots, the first at start = max(now, last + T), the
-- last at end = start + (c - 1)*T; it is allowed iff end - now <= (B - 1)*T. It admits exactly
-- what GCRA admits. An allowed request's wait for its slot is start - now =
-- reset_after - c*T (what the layer's delay mode sleeps).
--
-- KEYS[1]  the client's state key. Value: last, the time of the last slot handed out (µs), as
--          a decimal string; a missing key is an empty queue.
-- ARGV[1]  L: limit, requests per period (not needed here; every script takes the same ARGV)
-- ARGV[2]  P: period, µs (not needed here)
-- ARGV[3]  B: burst, the queue's capacity in slots
-- ARGV[4]  T: µs between slots (ceil(P / L))
-- ARGV[5]  cost in slots, >= 1
-- ARGV[6]  now, µs since the Unix epoch, or "" to use the server's clock
-- ARGV[7]  optional: "1" for a dry run that decides exactly as usual but writes nothing (used
--          by lua/stacked.lua to decide stacked limits before consuming any); absent: writes.
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--          retry_after is -1 when allowed, and when cost > B (never allowed).
--
-- Calls: the server's clock (only when ARGV[6] is ""), one GET, and one SET ... PX on allow (not in a dry run).
-- A denial writes nothing. The TTL is ceil((last + T - now) / 1000) ms: until the queue is empty.
--
-- By hand, 10/s with burst 20 (T = 100000 µs), cost 1, server time:
--   redis-cli EVAL "$(cat lua/prelude.lua lua/leaky_bucket.lua)" 1 'tollgate:api:lb:{10.0.0.1}' 10 1000000 20 100000 1 ''
--   redis-cli SCRIPT LOAD "$(cat lua/prelude.lua lua/leaky_bucket.lua)"    # prints the sha, then:
--   redis-cli EVALSHA <sha> 1 'tollgate:api:lb:{10.0.0.1}' 10 1000000 20 100000 1 ''

local burst = tonumber(ARGV[3])
local t = math.max(tonumber(ARGV[4]), 1)
local cost = math.max(tonumber(ARGV[5]), 1)
local dry = ARGV[7] == '1'
local now = now_us(ARGV[6])

local capacity = burst * t
-- (B - 1)*T: the latest a slot may lie from now.
local last_offset = (burst - 1) * t
-- start - now: how long the queue ahead of a new request takes to drain.
local backlog = 0
local last = redis.call('GET', KEYS[1])
if last then
  if not string.find(last, '^%d+$') then
    unreadable(KEYS[1])
  end
  backlog = math.max(tonumber(last) + t - now, 0)
end

local function deny(retry_after)
  return {0, idiv(math.max(capacity - backlog, 0), t), backlog, retry_after}
end

if cost > burst then
  return deny(-1)
end
-- end - now
local finish = backlog + (cost - 1) * t
if finish > last_offset then
  return deny(finish - last_offset)
end
if not dry then
  redis.call('SET', KEYS[1], int(now + finish), 'PX', int(idiv(finish + t + 999, 1000)))
end
return {1, idiv(last_offset - finish, t), finish + t, -1}
