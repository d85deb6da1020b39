-- tollgate: a plain counter (Policy::with_plain_counter), as envoyproxy/ratelimit keeps its
-- fixed windows: an integer per window, added to by INCRBY and kept for one period by EXPIRE
-- (its src/redis/fixed_cache_impl.go lines 35-38), so that it and tollgate share each count.
-- The store runs this script only where one atomic step is needed (a refused request that
-- consumes nothing, plain counters stacked with other algorithms, a refund); charging every
-- hit it sends the reference's own pipeline of INCRBY + EXPIRE instead (counters.rs). Inside
-- the script, which nothing interleaves with, the count it read plus the cost is written with
-- one SET ... EX: the same value and time to live as INCRBY + EXPIRE, one call fewer.
--
-- KEYS[1]  the counter: the client key and the window's start in Unix seconds, which the store
--          computed from ARGV[6] (a plain counter's window is the instance's clock's, never
--          Redis TIME). Value: a decimal integer, with a TTL of one period.
-- ARGV[1]  L, the limit per window          ARGV[2]  P, the window in µs (whole seconds)
-- ARGV[3]  B (unused here)                  ARGV[4]  T (unused here)
-- ARGV[5]  cost, >= 0 (0: a look, in a dry run)   ARGV[6]  now in µs (always given)
-- ARGV[7]  optional: "1" a dry run that decides exactly as usual and writes nothing; "c":
--          writes, and a denial is charged too (INCRBY past the limit, unbounded, as the
--          reference's INCRBY is); "r": gives ARGV[5] units back (never below 0) and replies
--          {1, 0, 0, -1}; absent or anything else: writes when allowed.
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--
-- Calls: GET, then SET ... EX when it counts.
-- By hand:
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/request.lua src/store/redis/lua/plain_counter.lua)" 1 edge_remote_address_10.0.0.1_1700000040 100 60000000 100 600000 1 1700000055000000
-- Must decide exactly like src/algorithm/fixed_window.rs on the counter's count.

local count = 0
local raw = redis.call('GET', key)
if raw then
  count = tonumber(raw)
  if not count then
    rare().unreadable(key)
  end
end
local mode = ARGV[7]
if mode == 'r' then
  local back = math.min(count, cost)
  if back > 0 then
    redis.call('DECRBY', key, string.format('%d', back))
  end
  return {1, 0, 0, -1}
end

local window_end = now - now % period + period
local seconds = string.format('%d', math.floor(period / 1000000))
if count + cost <= limit then
  if mode ~= '1' then
    redis.call('SET', key, string.format('%d', count + cost), 'EX', seconds)
  end
  return {1, limit - count - cost, window_end - now, -1}
end

-- The next window starts empty: any cost up to L fits at its start and not before.
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
if mode == 'c' then
  redis.call('SET', key, string.format('%d', count + cost), 'EX', seconds)
end
return {0, left, reset_after, retry_after}
