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
--          by lua/stacked.lua to decide stacked limits before consuming any); absent: writes.
-- ARGV[8]  optional: block_for, µs. When above 0, a denial that a wait could turn into an allow
--          (not in a dry run) blocks the client for block_for from now, and the reply is the
--          block's; the key holds a block marker (see lua/prelude.lua) until it ends.
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--
-- Calls: the server's clock (only when ARGV[6] is ""), GET, and SET ... PX on allow (not in a dry run);
-- nothing is written on deny.
-- By hand:
--   redis-cli EVAL "$(cat lua/prelude.lua lua/sliding_window.lua)" 1 rl:api:sw:{alice} 10 60000000 10 6000000 1 ""
--   redis-cli SCRIPT LOAD "$(cat lua/prelude.lua lua/sliding_window.lua)"   # then EVALSHA <sha> 1 <key> <argv...>
-- Must decide exactly like src/algorithm/sliding_window.rs: the estimate is computed with the
-- same double operations in the same order, so both agree bit for bit.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period = math.max(tonumber(ARGV[2]), 1)
local cost = math.max(tonumber(ARGV[5]), 1)
local dry = ARGV[7] == '1'
local now = now_us(ARGV[6])

local start, prev, curr = 0, 0, 0
local raw = redis.call('GET', key)
if raw then
  local s, p, c = string.match(raw, '^s(%d+):(%d+):(%d+)$')
  if not s then
    -- Not a window: a block (see lua/prelude.lua), or data that is not ours.
    local until_us = block_until(raw) or unreadable(key)
    if until_us > now then
      return blocked_reply(until_us, now, limit, cost)
    end
    s, p, c = '0', '0', '0'
  end
  start, prev, curr = tonumber(s), tonumber(p), tonumber(c)
end

-- The window holding t, its counts, and how far into it t is. A clock that went back (before
-- start) is treated as standing at start.
local function view(t)
  local at = math.max(t, start)
  local ws = at - at % period
  local p, c = 0, 0
  if ws == start then
    p, c = prev, curr
  elseif ws == start + period then
    p, c = curr, 0
  end
  return ws, p, c, at - ws
end

-- prev * ((P - elapsed) / P) + curr, in this order (as in Rust).
local function estimate(p, c, elapsed)
  local weight = (period - elapsed) / period
  return p * weight + c
end

local function fits(est)
  return est + cost <= limit
end

local function remaining(est)
  local left = math.floor(limit - est)
  if left > 0 then
    return left
  end
  return 0
end

-- When the estimate reaches 0: curr counts until the end of the next window, a lone prev
-- until the end of this one.
local function reset_after(ws, p, c)
  local at = 0
  if c > 0 then
    at = ws + 2 * period
  elseif p > 0 then
    at = ws + period
  end
  return math.max(at - now, 0)
end

local ws, p, c, elapsed = view(now)

if fits(estimate(p, c, elapsed)) then
  local nc = c + cost
  local ttl_ms = math.max(math.ceil((ws + 2 * period - now) / 1000), 1)
  if not dry then
    redis.call('SET', key, 's' .. int(ws) .. ':' .. int(p) .. ':' .. int(nc), 'PX', int(ttl_ms))
  end
  return {1, remaining(estimate(p, nc, elapsed)), reset_after(ws, p, nc), -1}
end

local retry_after = -1
if cost <= limit then
  -- The same search as Rust's retry_at: an exact-arithmetic candidate, then the double test
  -- decides with steps of 1, 2, 4... µs and a bisection. The test is monotone in time and
  -- passes at ws + 2P, where the estimate is 0.
  local function allows(t)
    local w, wp, wc, e = view(t)
    return fits(estimate(wp, wc, e))
  end
  local function decay_until(room, n)
    if n == 0 then
      return 0
    end
    return period - math.min(math.floor(room * period / n), period)
  end
  local candidate
  if c + cost <= limit then
    candidate = ws + decay_until(limit - c - cost, p)
  else
    candidate = ws + period + decay_until(limit - cost, c)
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
local reply = {0, remaining(estimate(p, c, elapsed)), reset_after(ws, p, c), retry_after}
return block_after(key, false, ARGV, reply, now, limit, cost)
