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
--          by stacked.lua to decide stacked limits before consuming any); absent: writes;
--          "c": writes, and a denial is charged (src/algorithm/sliding_window_log.rs, `record`).
-- ARGV[8]  optional: block_for, µs. When above 0, a denial that a wait could turn into an allow
--          (not in a dry run) blocks the client for block_for from now, and the reply is the
--          block's; the key holds a block marker (see prelude.lua) until it ends.
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--
-- Calls, each O(log n) for n members (O(n) on the small sets Redis keeps as a listpack, by
-- default up to 128 members): the server's clock (only when ARGV[6] is ""), ZRANGE (newest),
-- then, when a member still counts, ZRANGEBYSCORE ... LIMIT 0 1 (the oldest member that
-- counts). Allow: ZREMRANGEBYSCORE (trims expired members: each member is trimmed once;
-- skipped while no member has expired since the log started), ZREM (only when the newest
-- member has this very µs, to add to it), ZADD, PEXPIRE; a dry run skips these. Deny: nothing
-- more when the oldest member that counts frees enough room (or cost > L); else the trim,
-- ZCARD and a binary search of ZRANGE calls over the first `need` members to find when enough
-- cost expires. A deny writes nothing but that trim (which decides nothing: trimmed members no
-- longer count).
-- By hand:
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/request.lua src/store/redis/lua/sliding_window_log.lua)" 1 rl:api:swl:{alice} 10 60000000 10 6000000 1 ""
--   redis-cli SCRIPT LOAD "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/request.lua src/store/redis/lua/sliding_window_log.lua)"   # then EVALSHA <sha> 1 <key> <argv...>
-- Must decide exactly like src/algorithm/sliding_window_log.rs.

-- Kept lean on purpose (see prelude.lua): no local functions, numbers sent to Redis as
-- strings (Redis formats a Lua number with '%.17g', slower than Lua's own '%d').

local dry = ARGV[7] == '1'

-- Running totals wrap here; only differences less than L (< 2^32) apart are taken, so exact.
local WRAP = 2 ^ 52

-- The newest member: its µs, running total and cost.
local newest, newest_end, newest_cost
local m = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
local newest_member = m[1]
if newest_member then
  local total, c = string.match(newest_member, '^(%d+):(%d+)$')
  if total then
    newest, newest_end, newest_cost = m[2] + 0, total + 0, c + 0
  elseif newest_member == 'b' then
    -- A block (see prelude.lua): the only member, scored with its end.
    local until_us = m[2] + 0
    if until_us > now then
      return rare().blocked_reply(until_us, now, limit, cost)
    end
    if not dry then
      redis.call('DEL', key)
    end
    newest_member = nil
  else
    -- Data that is not ours.
    rare().unreadable(key)
  end
end
-- A clock that went back is treated as standing at the newest member: the log stays sorted.
local at = now
if newest and newest > at then
  at = newest
end

-- A member logged at t counts while at < t + P. base: the running total before the oldest
-- member that counts; oldest: its µs and cost.
local count, base = 0, 0
local oldest, oldest_cost
if newest then
  if newest + period > at then
    m = redis.call('ZRANGEBYSCORE', key, string.format('(%d', at - period), '+inf',
      'WITHSCORES', 'LIMIT', '0', '1')
    local total, c = string.match(m[1], '^(%d+):(%d+)$')
    if not total then
      rare().unreadable(key)
    end
    oldest, oldest_cost = m[2] + 0, c + 0
    base = (total - oldest_cost) % WRAP
    count = (newest_end - base) % WRAP
  else
    -- All expired: totals start again from 0.
    newest = nil
  end
end

if count + cost <= limit then
  local reply = {1, limit - count - cost, at + period - now, -1}
  if dry then
    return reply
  end
  -- Trims the expired members (all of them when newest is nil): each is trimmed once. Running
  -- totals start from 0 with the log, so base 0 says no member comes before the oldest that
  -- counts: nothing to trim (a young key's common case, one call saved).
  if newest_member and not (newest and base == 0) then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', at - period))
  end
  -- The running total through this request; the member of this µs, if any, takes its cost too.
  local total = (base + count + cost) % WRAP
  local logged = cost
  if newest == at then
    redis.call('ZREM', key, newest_member)
    logged = newest_cost + cost
  end
  redis.call('ZADD', key, string.format('%d', at), string.format('%d:%d', total, logged))
  -- At least 2 ms, not 1: PEXPIRE deletes the key at once when its deadline is not after the
  -- server's ms clock, which for 1 ms happens whenever a ms tick falls inside the command
  -- (Redis 7.0: about 1 in 7,000 calls). SET ... PX has no such check.
  local ttl_ms = math.ceil((at + period - now) / 1000)
  if ttl_ms < 2 then
    ttl_ms = 2
  end
  redis.call('PEXPIRE', key, string.format('%d', ttl_ms))
  return reply
end

local retry_after = -1
if cost <= limit then
  -- The oldest members must expire until count - freed + cost <= L: the first member whose
  -- running total reaches base + need completes that at its time + P, and nothing is freed
  -- before it. Most often that is the oldest (it holds need or more); else it is found by a
  -- binary search by rank: each member holds at least 1, so it is among the first `need` (and
  -- the last member, at count >= need, always qualifies).
  local need = count + cost - limit
  local found = oldest
  if oldest_cost < need then
    -- Ranks count from the oldest member that counts: trim the expired ones first.
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', at - period))
    local card = redis.call('ZCARD', key)
    if card > need then
      card = need
    end
    local lo, hi = 0, card - 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      m = redis.call('ZRANGE', key, mid, mid)
      local mid_end = string.match(m[1], '^(%d+):%d+$')
      if not mid_end then
        rare().unreadable(key)
      end
      if (mid_end - base) % WRAP >= need then
        hi = mid
      else
        lo = mid + 1
      end
    end
    m = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')
    found = m[2] + 0
  end
  retry_after = found + period - now
end
local reset_after = 0
if count > 0 then
  reset_after = newest + period - now
end
local left = limit - count
if left < 0 then
  left = 0
end
local reply = {0, left, reset_after, retry_after}
if ARGV[7] == 'c' then
  -- Charged while over (src/algorithm/sliding_window_log.rs, `record`): logged as an allowed
  -- request is, but only as much as keeps the log's total within 2 * L.
  local charged = 2 * limit - count
  if charged > cost then
    charged = cost
  end
  if charged > 0 then
    if newest_member and not (newest and base == 0) then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', at - period))
    end
    local total = (base + count + charged) % WRAP
    local logged = charged
    if newest == at then
      redis.call('ZREM', key, newest_member)
      logged = newest_cost + charged
    end
    redis.call('ZADD', key, string.format('%d', at), string.format('%d:%d', total, logged))
    local ttl_ms = math.ceil((at + period - now) / 1000)
    if ttl_ms < 2 then
      ttl_ms = 2
    end
    redis.call('PEXPIRE', key, string.format('%d', ttl_ms))
  end
  return reply
end
if ARGV[8] then
  return rare().block_after(key, true, ARGV, reply, now, limit, cost)
end
return reply
