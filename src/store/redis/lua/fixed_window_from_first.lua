-- tollgate: fixed window opened by a key's first request, one decision per call.
--
-- KEYS[1]  the client's state key. Value: the string "f<start>:<count>" (when the window opened,
--          in µs; cost allowed in it), always with a TTL that ends with the window.
-- ARGV[1]  L, the limit per window          ARGV[2]  P, the window length in µs
-- ARGV[3]  B, burst (unused here)           ARGV[4]  T, interval in µs (unused here)
-- ARGV[5]  cost, >= 1                       ARGV[6]  now in µs, or "" for the server's clock
-- ARGV[7]  optional: "1" for a dry run that decides exactly as usual but writes nothing (used
--          by stacked.lua to decide stacked limits before consuming any); absent: writes;
--          "c": writes, and a denial is charged (src/algorithm/window.rs, `record`).
-- ARGV[8]  optional: block_for, µs. When above 0, a denial that a wait could turn into an allow
--          (not in a dry run) blocks the client for block_for from now, and the reply is the
--          block's; the key holds a block marker (see prelude.lua) until it ends.
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--
-- Calls: the server's clock (only when ARGV[6] is ""), GET, and SET ... PX on allow (not in a dry run);
-- nothing is written on deny.
-- By hand:
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/request.lua src/store/redis/lua/fixed_window_from_first.lua)" 1 rl:api:fwf:{alice} 10 60000000 10 6000000 1 ""
--   redis-cli SCRIPT LOAD "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/request.lua src/store/redis/lua/fixed_window_from_first.lua)"   # then EVALSHA <sha> 1 <key> <argv...>
-- Must decide exactly like src/algorithm/fixed_window_from_first.rs.

-- Kept lean on purpose: see prelude.lua.

local start, count = 0, 0
local raw = redis.call('GET', key)
if raw then
  local s, c = string.match(raw, '^f(%d+):(%d+)$')
  if s then
    start, count = s + 0, c + 0
  else
    -- Not a window: a block (see prelude.lua), or data that is not ours.
    local r = rare()
    local until_us = r.block_at(key, raw, now)
    if until_us then
      return r.blocked_reply(until_us, now, limit, cost)
    end
  end
end

-- A new key, or the first request after the window ended, opens a window now. A clock that
-- went back (before start) stays in the stored window.
if not (count > 0 and now < start + period) then
  start, count = now, 0
end
local window_end = start + period

if count + cost <= limit then
  count = count + cost
  if ARGV[7] ~= '1' then
    local ttl_ms = math.ceil((window_end - now) / 1000)
    if ttl_ms < 1 then
      ttl_ms = 1
    end
    redis.call('SET', key, string.format('f%d:%d', start, count), 'PX',
      string.format('%d', ttl_ms))
  end
  return {1, limit - count, window_end - now, -1}
end

-- At the window's end a new one opens empty: any cost up to L fits then and not before.
local retry_after = -1
if cost <= limit then
  retry_after = window_end - now
end
local reset_after = 0
if count > 0 then
  reset_after = window_end - now
end
local left = limit - count
if left < 0 then
  left = 0
end
local reply = {0, left, reset_after, retry_after}
if ARGV[7] == 'c' then
  -- Charged while over (src/algorithm/window.rs, `record`): the count goes past the limit,
  -- to at most 2 * L (a count already above stays).
  local charged = rare().charged_to(count, cost, 2 * limit)
  local ttl_ms = math.ceil((window_end - now) / 1000)
  if ttl_ms < 1 then
    ttl_ms = 1
  end
  redis.call('SET', key, string.format('f%d:%d', start, charged), 'PX',
    string.format('%d', ttl_ms))
  return reply
end
if ARGV[8] then
  return rare().block_after(key, false, ARGV, reply, now, limit, cost)
end
return reply
