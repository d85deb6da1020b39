-- tollgate: the prelude. RedisStore puts this file in front of every script it runs (each
-- lua/<algorithm>.lua, and once in front of the stacked script), so what every script needs is
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
