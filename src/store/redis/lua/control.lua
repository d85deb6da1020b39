-- tollgate: acting on one client (Store::reset, Store::block, Store::refund), one call each.
--
-- KEYS[1]  the client's state key, as the algorithm's own script names it
-- ARGV[1]  the operation: "reset" (forget the state and any block), "block" (deny for ARGV[7]
--          µs from now; replaces the state), or "refund" (give back ARGV[7] units)
-- ARGV[2]  algorithm index (1-based, Algorithm::ALL order: gcra, token_bucket, leaky_bucket,
--          fixed_window, fixed_window_from_first, sliding_window_log, sliding_window)
-- ARGV[3]  L   ARGV[4]  P, µs   ARGV[5]  B   ARGV[6]  T, µs   (as the algorithm scripts take them)
-- ARGV[7]  the block's duration in µs (0: a reset), or the units to refund
-- ARGV[8]  now, µs since the Unix epoch, or "" to use the server's clock
-- ARGV[9], ARGV[10]  optional: the rule's own T and B, when the policy's quota is another (a
--          client's own): a bucket's plain state is read in that scale, and a refunded bucket
--          is written marked with the policy's (see prelude.lua). A bucket in another scale
--          than the policy's is converted first, keeping the units used.
-- Reply:   {1}
--
-- A refund gives back what the algorithm allows, exactly as src/algorithm/*.rs `refund` does:
-- GCRA and the leaky bucket move the TAT back by n*T but never before now; the token bucket adds
-- n tokens up to B; the windows lower the current window's count (not below 0); the log removes
-- its newest n units. A blocked client, or one with no state, is left as it is. State that
-- decides like none afterwards is deleted; the rest keeps the TTL its algorithm gives it.
--
-- By hand (after prelude.lua), give 2 back to a 10/s GCRA client:
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/control.lua)" 1 'tollgate:api:gcra:{10.0.0.1}' refund 1 10 1000000 10 100000 2 ''

local key = KEYS[1]
local op = ARGV[1]
if op == 'reset' then
  redis.call('DEL', key)
  return {1}
end
local algorithm = tonumber(ARGV[2])
local period = math.max(tonumber(ARGV[4]), 1)
local burst = tonumber(ARGV[5])
local t = math.max(tonumber(ARGV[6]), 1)
local n = tonumber(ARGV[7])
local zset = algorithm == 6
local r = rare()
local now = r.now(ARGV[8])

if op == 'block' then
  if n > 0 then
    r.set_block(key, zset, now + n, now)
  else
    redis.call('DEL', key)
  end
  return {1}
end
if op ~= 'refund' then
  return redis.error_reply('tollgate control: unknown operation ' .. tostring(op))
end

-- Stores `value` until `expires` (µs), or deletes the key once that has come.
local function store(value, expires)
  if expires <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, value, 'PX', string.format('%d', math.ceil((expires - now) / 1000)))
  end
end

if zset then
  local WRAP = 2 ^ 52
  local left = n
  while left > 0 do
    local m = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if not m[1] then
      break
    end
    if m[1] == 'b' then
      -- A block stays as it is.
      return {1}
    end
    local total, c = string.match(m[1], '^(%d+):(%d+)$')
    if not total then
      r.unreadable(key)
    end
    total, c = tonumber(total), tonumber(c)
    redis.call('ZREM', key, m[1])
    if c > left then
      redis.call('ZADD', key, m[2], string.format('%d:%d', (total - left) % WRAP, c - left))
      left = 0
    else
      left = left - c
    end
  end
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[1] then
    local ms = math.ceil((tonumber(newest[2]) + period - now) / 1000)
    if ms < 1 then
      redis.call('DEL', key)
    else
      -- At least 2 ms: see the PEXPIRE in sliding_window_log.lua.
      redis.call('PEXPIRE', key, string.format('%d', math.max(ms, 2)))
    end
  end
  return {1}
end

local value = redis.call('GET', key)
if not value or r.block_until(value) then
  return {1}
end
-- A bucket's scale when plain (the rule's), and how it is written (marked with the policy's
-- when that is another).
local home_t, home_b = tonumber(ARGV[9]), tonumber(ARGV[10])
local mark = ''
if home_t then
  mark = string.format(':%d:%d', t, burst)
else
  home_t, home_b = t, burst
end
if algorithm == 1 or algorithm == 3 then
  local tat = tonumber(string.match(value, '^(%d+)$') or '')
  if tat then
    tat = r.gcra_in(tat, home_t, home_b, t, burst, now)
  else
    local kept, from_t, from_b = r.marked(value, 3)
    if not kept then
      r.unreadable(key)
    end
    tat = r.gcra_in(kept, from_t, from_b, t, burst, now)
  end
  if tat > now then
    tat = math.max(tat - n * t, now)
    store(string.format('%d', tat) .. mark, tat)
  end
elseif algorithm == 2 then
  local stored, at = string.match(value, '^(%d+):(%d+)$')
  if stored then
    stored, at = r.bucket_in(tonumber(stored), tonumber(at), home_t, home_b, t, burst, now)
  else
    local kept, kept_at, from_t, from_b = r.marked(value, 4)
    if not kept then
      r.unreadable(key)
    end
    stored, at = r.bucket_in(kept, kept_at, from_t, from_b, t, burst, now)
  end
  local capacity = burst * t
  local credit = math.min(stored + math.max(now - at, 0), capacity)
  credit = math.min(credit + n * t, capacity)
  local updated_at = math.max(at, now)
  store(string.format('%d:%d', credit, updated_at) .. mark, updated_at + capacity - credit)
elseif algorithm == 4 or algorithm == 5 then
  local prefix = 'w'
  if algorithm == 5 then
    prefix = 'f'
  end
  local s, c = string.match(value, '^' .. prefix .. '(%d+):(%d+)$')
  if not s then
    r.unreadable(key)
  end
  s, c = tonumber(s), tonumber(c)
  local current
  if algorithm == 4 then
    current = now - now % period <= s
  else
    current = now < s + period
  end
  if current and c > 0 then
    c = math.max(c - n, 0)
    if c == 0 then
      redis.call('DEL', key)
    else
      store(string.format('%s%d:%d', prefix, s, c), s + period)
    end
  end
elseif algorithm == 7 then
  local s, p, c = string.match(value, '^s(%d+):(%d+):(%d+)$')
  if not s then
    r.unreadable(key)
  end
  s, p, c = tonumber(s), tonumber(p), tonumber(c)
  local at = math.max(now, s)
  if at - at % period == s then
    c = math.max(c - n, 0)
    local expires = 0
    if c > 0 then
      expires = s + 2 * period
    elseif p > 0 then
      expires = s + period
    end
    store(string.format('s%d:%d:%d', s, p, c), expires)
  end
else
  return redis.error_reply('tollgate control: unknown algorithm ' .. tostring(ARGV[2]))
end
return {1}
