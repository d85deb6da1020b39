-- tollgate: sliding window counter (two epoch-aligned windows weighted into an estimate), one
-- decision per call.
--
-- KEYS[1]  the client's state key. Value: the string "s<start>:<prev>:<curr>" (start of the
--          current window in µs, cost allowed in the window before it, cost allowed in it),
--          always with a TTL that ends when both counts stop counting.
-- ARGV[1]  L, the limit per period          ARGV[2]  P, the window length in µs
-- ARGV[3]  B, burst (unused here)           ARGV[4]  T, interval in µs (unused here)
-- ARGV[5]  cost, >= 1                       ARGV[6]  now in µs, or "" for the server's clock
-- ARGV[7]  optional: "1" for a dry run that decides exactly as usual but writes nothing (used
--          by stacked.lua to decide stacked limits before consuming any); absent: writes;
--          "c": writes, and a denial is charged (src/algorithm/sliding_window.rs, `record`).
-- ARGV[8]  optional: block_for, µs. When above 0, a denial that a wait could turn into an allow
--          (not in a dry run) blocks the client for block_for from now, and the reply is the
--          block's; the key holds a block marker (see prelude.lua) until it ends.
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--
-- Calls: the server's clock (only when ARGV[6] is ""), GET, and SET ... PX on allow (not in a dry run);
-- nothing is written on deny.
-- By hand:
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/request.lua src/store/redis/lua/sliding_window.lua)" 1 rl:api:sw:{alice} 10 60000000 10 6000000 1 ""
--   redis-cli SCRIPT LOAD "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/request.lua src/store/redis/lua/sliding_window.lua)"   # then EVALSHA <sha> 1 <key> <argv...>
-- Must decide exactly like src/algorithm/sliding_window.rs: the estimate is computed with the
-- same double operations in the same order, so both agree bit for bit.

-- Kept lean on purpose (see prelude.lua): the common path calls no local function, so the
-- window's view and the estimate are written out where they are needed.

local start, prev, curr = 0, 0, 0
local raw = redis.call('GET', key)
if raw then
  local s, p, c = string.match(raw, '^s(%d+):(%d+):(%d+)$')
  if s then
    start, prev, curr = s + 0, p + 0, c + 0
  else
    -- Not a window: a block (see prelude.lua), or data that is not ours.
    local r = rare()
    local until_us = r.block_at(key, raw, now)
    if until_us then
      return r.blocked_reply(until_us, now, limit, cost)
    end
  end
end

-- The window holding now (ws), its counts (p, c), and how far into it now is. A clock that
-- went back (before start) is treated as standing at start.
local at = now
if at < start then
  at = start
end
local ws = at - at % period
local p, c = 0, 0
if ws == start then
  p, c = prev, curr
elseif ws == start + period then
  p, c = curr, 0
end
local elapsed = at - ws
-- The estimate: prev * ((P - elapsed) / P) + curr, in this order (as in Rust).
local weight = (period - elapsed) / period
local estimate = p * weight + c

-- reset_after: when the estimate reaches 0. curr counts until the end of the next window, a
-- lone prev until the end of this one.
if estimate + cost <= limit then
  local nc = c + cost
  if ARGV[7] ~= '1' then
    local ttl_ms = math.ceil((ws + 2 * period - now) / 1000)
    if ttl_ms < 1 then
      ttl_ms = 1
    end
    redis.call('SET', key, string.format('s%d:%d:%d', ws, p, nc), 'PX',
      string.format('%d', ttl_ms))
  end
  local left = math.floor(limit - (p * weight + nc))
  if left < 0 then
    left = 0
  end
  local reset_after = ws + 2 * period - now
  if nc == 0 then
    -- A look (cost 0) at a key with nothing in this window: a lone prev, or nothing.
    reset_after = 0
    if p > 0 then
      reset_after = ws + period - now
    end
  end
  if reset_after < 0 then
    reset_after = 0
  end
  return {1, left, reset_after, -1}
end

local retry_after = -1
if cost <= limit then
  -- The same search as Rust's retry_at: an exact-arithmetic candidate, then the double test
  -- decides with steps of 1, 2, 4... µs and a bisection. The test is monotone in time and
  -- passes at ws + 2P, where the estimate is 0.
  local function allows(t)
    local at = t
    if at < start then
      at = start
    end
    local tws = at - at % period
    local tp, tc = 0, 0
    if tws == start then
      tp, tc = prev, curr
    elseif tws == start + period then
      tp, tc = curr, 0
    end
    return tp * ((period - (at - tws)) / period) + tc + cost <= limit
  end
  -- When n units decay enough to leave `room`: period - min(floor(room * P / n), P), or 0.
  local candidate
  if c + cost <= limit then
    candidate = ws
    if p > 0 then
      candidate = ws + period - math.min(math.floor((limit - c - cost) * period / p), period)
    end
  else
    candidate = ws + period
    if c > 0 then
      candidate = ws + 2 * period - math.min(math.floor((limit - cost) * period / c), period)
    end
  end
  local no, yes = ws + elapsed, ws + 2 * period
  candidate = math.min(math.max(candidate, no + 1), yes)
  local step = 1
  if allows(candidate) then
    yes = candidate
    while yes - no > step do
      local probe = yes - step
      if not allows(probe) then
        no = probe
        break
      end
      yes = probe
      step = step * 2
    end
  else
    no = candidate
    while yes - no > step do
      local probe = no + step
      if allows(probe) then
        yes = probe
        break
      end
      no = probe
      step = step * 2
    end
  end
  while yes - no > 1 do
    local mid = no + math.floor((yes - no) / 2)
    if allows(mid) then
      yes = mid
    else
      no = mid
    end
  end
  retry_after = yes - now
end
local left = math.floor(limit - estimate)
if left < 0 then
  left = 0
end
local at_zero = 0
if c > 0 then
  at_zero = ws + 2 * period
elseif p > 0 then
  at_zero = ws + period
end
local reset_after = at_zero - now
if reset_after < 0 then
  reset_after = 0
end
local reply = {0, left, reset_after, retry_after}
if ARGV[7] == 'c' then
  -- Charged while over (src/algorithm/sliding_window.rs, `record`): the current window's
  -- count goes past the limit, to at most 2 * L (a count already above stays).
  local nc = rare().charged_to(c, cost, 2 * limit)
  local ttl_ms = math.ceil((ws + 2 * period - now) / 1000)
  if ttl_ms < 1 then
    ttl_ms = 1
  end
  redis.call('SET', key, string.format('s%d:%d:%d', ws, p, nc), 'PX',
    string.format('%d', ttl_ms))
  return reply
end
if ARGV[8] then
  return rare().block_after(key, false, ARGV, reply, now, limit, cost)
end
return reply
