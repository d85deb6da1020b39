-- tollgate: sliding window log (the exact log of allowed requests in the last P), one decision
-- per call.
--
-- KEYS[1]  the client's state key: a sorted set with one member per distinct µs at which cost
--          was allowed, scored by that µs. A member is "<end>:<cost>": the cost allowed then,
--          and the running total of cost logged through it (mod 2^52), so the count is one
--          subtraction and the member that frees enough room is found by binary search. A
--          request of any cost is one member (or adds to the member of its µs). At most L
--          members; the key's TTL ends when its newest member expires (rounded up to whole ms,
--          and at least 2 ms).
-- ARGV[1]  L, the limit per period          ARGV[2]  P, the period in µs
-- ARGV[3]  B, burst (unused here)           ARGV[4]  T, interval in µs (unused here)
-- ARGV[5]  cost, >= 1                       ARGV[6]  now in µs, or "" for the server's clock
-- ARGV[7]  optional: "1" for a dry run that decides exactly as usual but writes nothing (used
--          by lua/stacked.lua to decide stacked limits before consuming any); absent: writes.
-- ARGV[8]  optional: block_for, µs. When above 0, a denial that a wait could turn into an allow
--          (not in a dry run) blocks the client for block_for from now, and the reply is the
--          block's; the key holds a block marker (see lua/prelude.lua) until it ends.
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--
-- Calls, each O(log n) for n members: the server's clock (only when ARGV[6] is ""), ZRANGE
-- (newest), then, when the key exists, ZREMRANGEBYSCORE (trims expired members: each member
-- is trimmed once) and ZRANGE (oldest). Allow: ZREM (only when the newest member has this very
-- µs, to add to it), ZADD, PEXPIRE; a dry run skips these. Deny: ZCARD and a binary search of
-- ZRANGE calls over the first `need` members to find when enough cost expires (none when the
-- oldest member suffices, or cost > L). A deny, like a dry run, only trims expired members
-- (which decides nothing: they no longer count).
-- By hand:
--   redis-cli EVAL "$(cat lua/prelude.lua lua/sliding_window_log.lua)" 1 rl:api:swl:{alice} 10 60000000 10 6000000 1 ""
--   redis-cli SCRIPT LOAD "$(cat lua/prelude.lua lua/sliding_window_log.lua)"   # then EVALSHA <sha> 1 <key> <argv...>
-- Must decide exactly like src/algorithm/sliding_window_log.rs.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period = math.max(tonumber(ARGV[2]), 1)
local cost = math.max(tonumber(ARGV[5]), 1)
local dry = ARGV[7] == '1'
local now = now_us(ARGV[6])

-- Running totals wrap here; only differences less than L (< 2^32) apart are taken, so exact.
local WRAP = 2 ^ 52

-- The member at `rank` (0 oldest, -1 newest): its µs, running total and cost, or nil.
local function member(rank)
  local m = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
  if not m[1] then
    return nil
  end
  local total, c = string.match(m[1], '^(%d+):(%d+)$')
  if not total then
    -- Not a log entry: the block member 'b' (see lua/prelude.lua), with no end, or data that
    -- is not ours.
    if m[1] ~= 'b' then
      unreadable(key)
    end
    return tonumber(m[2]), -1, 0, m[1]
  end
  return tonumber(m[2]), tonumber(total), tonumber(c), m[1]
end

local newest, newest_end, newest_cost, newest_member = member(-1)
if newest_end == -1 then
  -- A block: the only member, scored with its end.
  if newest > now then
    return blocked_reply(newest, now, limit, cost)
  end
  if not dry then
    redis.call('DEL', key)
  end
  newest = nil
end
-- A clock that went back is treated as standing at the newest member: the log stays sorted.
local at = now
if newest and newest > at then
  at = newest
end

-- A member logged at t counts while at < t + P. base: the running total before the oldest.
local count, base = 0, 0
if newest then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(at - period))
  if newest + period > at then
    local _, oldest_end, oldest_cost = member(0)
    base = (oldest_end - oldest_cost) % WRAP
    count = (newest_end - base) % WRAP
  else
    -- All expired: the key is gone, and totals start again from 0.
    newest = nil
  end
end

if count + cost <= limit then
  local reply = {1, limit - count - cost, at + period - now, -1}
  if dry then
    return reply
  end
  -- The running total through this request; the member of this µs, if any, takes its cost too.
  local total = (base + count + cost) % WRAP
  local logged = cost
  if newest == at then
    redis.call('ZREM', key, newest_member)
    logged = newest_cost + cost
  end
  redis.call('ZADD', key, int(at), int(total) .. ':' .. int(logged))
  -- At least 2 ms, not 1: PEXPIRE deletes the key at once when its deadline is not after the
  -- server's ms clock, which for 1 ms happens whenever a ms tick falls inside the command
  -- (Redis 7.0: about 1 in 7,000 calls). SET ... PX has no such check.
  local ttl_ms = math.max(math.ceil((at + period - now) / 1000), 2)
  redis.call('PEXPIRE', key, int(ttl_ms))
  return reply
end

local retry_after = -1
if cost <= limit then
  -- The oldest members must expire until count - freed + cost <= L: the first member whose
  -- running total reaches base + need completes that at its time + P, and nothing is freed
  -- before it. Each member holds at least 1, so it is among the first `need` (and the last
  -- member, at count >= need, always qualifies).
  local need = count + cost - limit
  local lo, hi = 0, math.min(need, redis.call('ZCARD', key)) - 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local _, mid_end = member(mid)
    if (mid_end - base) % WRAP >= need then
      hi = mid
    else
      lo = mid + 1
    end
  end
  retry_after = member(lo) + period - now
end
local reset_after = 0
if count > 0 then
  reset_after = newest + period - now
end
local reply = {0, math.max(limit - count, 0), reset_after, retry_after}
return block_after(key, true, ARGV, reply, now, limit, cost)
