-- tollgate: the prelude. RedisStore puts this file in front of every script it runs (each
-- lua/<algorithm>.lua, once in front of the stacked script, and lua/control.lua), so what every script needs is
-- written once, and this is the only place that reads the server clock.
--
-- A script alone is not runnable: run it with the prelude in front, e.g.
--   redis-cli EVAL "$(cat lua/prelude.lua lua/gcra.lua)" 1 'tollgate:api:gcra:{10.0.0.1}' 10 1000000 20 100000 1 ''
--
-- Numbers are Lua doubles: exact for integers up to 2^53, which covers every µs timestamp and
-- now + B*T for any sensible quota.

-- The decision's time in µs: `arg` (µs since the Unix epoch, sent by a store given a clock), or
-- the server's clock when `arg` is "".
local function now_us(arg)
  if arg == '' then
    local time = redis.call('TIME')
    return tonumber(time[1]) * 1000000 + tonumber(time[2])
  end
  return tonumber(arg)
end

-- An integer as an exact decimal string (tostring() keeps only 14 significant digits).
local function int(x)
  return string.format('%.0f', x)
end

-- floor(a / b) for integers a >= 0, b >= 1: a / b in doubles can round to the next integer.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- Stops the script at a value it cannot read (another program's data at a tollgate key, or a
-- corrupt value), which is never overwritten. The store reports the error as this key's
-- problem, not Redis's (StoreError::KeyState).
local function unreadable(key)
  error('tollgate: cannot read the state at ' .. key)
end

-- Blocks. A blocked client's key holds a marker instead of its state, with a TTL that ends with
-- the block: the string 'b<until_us>', or for the sliding window log (a sorted set) the one
-- member 'b' scored until_us. Scripts look for it only where a value is not in their own format,
-- so the common path pays nothing for it. The block replaces the state: when it ends, the client
-- starts afresh. A marker whose time has come (the key outlives it by under 1 ms) is no state.

-- Until when the string `value` blocks (µs), or nil when it is not a marker.
local function block_until(value)
  local until_us = string.match(value, '^b(%d+)$')
  if until_us then
    return tonumber(until_us)
  end
  return nil
end

-- The reply to a request of `cost` at `now` by a client blocked until `until_us` under a
-- capacity of `burst`: denied, nothing left, whole and allowed when the block ends (never, for
-- a cost above the capacity).
local function blocked_reply(until_us, now, burst, cost)
  local rest = until_us - now
  if cost > burst then
    return {0, 0, rest, -1}
  end
  return {0, 0, rest, rest}
end

-- Replaces the state at `key` by a block until `until_us` (a sorted set's when `zset`).
local function set_block(key, zset, until_us, now)
  local ms = math.ceil((until_us - now) / 1000)
  if zset then
    redis.call('DEL', key)
    redis.call('ZADD', key, int(until_us), 'b')
    -- At least 2 ms: see the PEXPIRE in lua/sliding_window_log.lua.
    redis.call('PEXPIRE', key, int(math.max(ms, 2)))
  else
    redis.call('SET', key, 'b' .. int(until_us), 'PX', int(math.max(ms, 1)))
  end
end

-- After an algorithm denied a request (`reply`; not in a dry run): when ARGV[8], block_for in
-- µs, is there and above 0, and a wait could allow the request (retry_after >= 0), blocks the
-- client from now for block_for and answers as the block does; else answers `reply`.
local function block_after(key, zset, argv, reply, now, burst, cost)
  local block_for = tonumber(argv[8])
  if argv[7] == '1' or not block_for or block_for <= 0 or reply[4] < 0 then
    return reply
  end
  local until_us = now + block_for
  set_block(key, zset, until_us, now)
  return blocked_reply(until_us, now, burst, cost)
end
