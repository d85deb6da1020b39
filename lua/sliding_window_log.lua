-- tollgate: sliding window log (the exact log of allowed requests in the last P), one decision
-- per call.
--
-- KEYS[1]  the client's state key: a sorted set with one member per unit of allowed cost, scored
--          by the time (µs) it was allowed. Members are "<µs>" for the first unit logged at a
--          time and "<µs>:<n>" for the n-th, so they stay unique however many requests share a
--          microsecond. At most L members; the key's TTL ends when its newest member expires
--          (rounded up to whole ms, and at least 2 ms).
-- ARGV[1]  L, the limit per period          ARGV[2]  P, the period in µs
-- ARGV[3]  B, burst (unused here)           ARGV[4]  T, interval in µs (unused here)
-- ARGV[5]  cost, >= 1                       ARGV[6]  now in µs, or "" for the server's clock
-- ARGV[7]  optional: "1" for a dry run that decides exactly as usual but writes nothing (used
--          by lua/stacked.lua to decide stacked limits before consuming any); absent: writes.
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--
-- Calls: the server's clock (only when ARGV[6] is ""), ZRANGE (newest), then, when the key exists,
-- ZREMRANGEBYSCORE (trim expired members) and ZCARD. Allow: ZCOUNT (only when the newest
-- member has this very µs), ZADD (one per 500 units of cost), PEXPIRE; a dry run skips these
-- four. Deny: one ZRANGE to find when enough members expire (none when cost > L). A deny, like a
-- dry run, only trims expired members (which decides nothing: they no longer count).
-- By hand:
--   redis-cli EVAL "$(cat lua/prelude.lua lua/sliding_window_log.lua)" 1 rl:api:{alice} 10 60000000 10 6000000 1 ""
--   redis-cli SCRIPT LOAD "$(cat lua/prelude.lua lua/sliding_window_log.lua)"   # then EVALSHA <sha> 1 <key> <argv...>
-- Must decide exactly like src/algorithm/sliding_window_log.rs.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period = math.max(tonumber(ARGV[2]), 1)
local cost = math.max(tonumber(ARGV[5]), 1)
local dry = ARGV[7] == '1'
local now = now_us(ARGV[6])

-- pcall: a key of another type (another algorithm's state) counts as no history; it is
-- replaced on the next allowed request.
local top = redis.pcall('ZRANGE', key, -1, -1, 'WITHSCORES')
local foreign = top.err ~= nil
local newest = nil
if not foreign and top[2] then
  newest = tonumber(top[2])
end
-- A clock that went back is treated as standing at the newest entry: the log stays sorted.
local at = now
if newest and newest > at then
  at = newest
end

-- A member logged at t counts while at < t + P.
local count = 0
if newest then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(at - period))
  count = redis.call('ZCARD', key)
end

if count + cost <= limit then
  local reply = {1, limit - count - cost, at + period - now, -1}
  if dry then
    return reply
  end
  -- Members at this µs were numbered 0..first-1 (members of one score expire together).
  local first = 0
  if newest == at then
    first = redis.call('ZCOUNT', key, int(at), int(at))
  end
  if foreign then
    redis.call('DEL', key)
  end
  local stamp = int(at)
  local args = {}
  for n = first, first + cost - 1 do
    args[#args + 1] = stamp
    if n == 0 then
      args[#args + 1] = stamp
    else
      args[#args + 1] = stamp .. ':' .. int(n)
    end
    if #args >= 1000 then -- unpack() is limited to a few thousand values
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then
    redis.call('ZADD', key, unpack(args))
  end
  -- At least 2 ms, not 1: PEXPIRE deletes the key at once when its deadline is not after the
  -- server's ms clock, which for 1 ms happens whenever a ms tick falls inside the command
  -- (Redis 7.0: about 1 in 7,000 calls). SET ... PX has no such check.
  local ttl_ms = math.max(math.ceil((at + period - now) / 1000), 2)
  redis.call('PEXPIRE', key, int(ttl_ms))
  return reply
end

-- The oldest members must expire until count - freed + cost <= L: the need-th oldest completes
-- that at its time + P, and nothing is freed before it.
local retry_after = -1
if cost <= limit then
  local need = count + cost - limit
  local entry = redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')
  retry_after = tonumber(entry[2]) + period - now
end
local reset_after = 0
if count > 0 then
  reset_after = newest + period - now
end
return {0, math.max(limit - count, 0), reset_after, retry_after}
