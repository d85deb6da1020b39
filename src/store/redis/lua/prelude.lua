-- tollgate: the prelude. RedisStore puts this file in front of every script it runs (each
-- <algorithm>.lua, once in front of the stacked script, control.lua and lease.lua),
-- so the helpers every script shares are written once.
--
-- A script alone is not runnable: run it with the prelude in front, e.g.
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/gcra.lua)" 1 'tollgate:api:gcra:{10.0.0.1}' 10 1000000 20 100000 1 ''
--
-- Numbers are Lua doubles: exact for integers up to 2^53, which covers every µs timestamp and
-- now + B*T for any quota a Policy accepts (src/quota.rs bounds B*T to 100 years). So for
-- integers a >= 0 and b >= 1, math.floor(a / b) is exact: a / b can only round up to the next
-- integer when a >= 2^53.
--
-- Cheap on purpose: Redis runs scripts one at a time, so a script's server time is the ceiling
-- on decisions per second (scripts/script_cost.sh measures it against a bare GET + SET script).
-- What things cost in Redis 7.0's Lua 5.1 on the 2-core development machine, per call:
--   a redis.call                                    1.5 to 3 µs
--   string.format('%.0f', x)                        1.0 µs  (never: '%d' is exact, see below)
--   string.match with two captures                  0.85 µs
--   string.format('%d:%d', a, b) / '%d'             0.6 / 0.45 µs
--   a Lua number as an argument of redis.call       0.5 µs  (Redis 7.0 formats it with '%.17g')
--   string.find(s, '^%d+$')                         0.35 µs
--   a table of 4, tonumber(s)                       0.25 / 0.2 µs
--   a closure (a `local function`: built anew on every run of a script)   0.09 µs
--   math.max(a, b) (a global lookup and a call)     0.09 µs
--   s + 0 (a numeric string to a number), a + b     0.07 µs / a few ns
-- So the common path of each algorithm's script (allowed, or denied with no block) builds no
-- closure and calls no helper: it reads ARGV with `+ 0` (the store sends plain decimals) and
-- the clock in plain statements (request.lua, put in front of each), and sends every value
-- and TTL to Redis as one string.format('%d...') (Redis's Lua formats %d through a 64-bit
-- long: exact below 2^53, where '%.0f' costs twice as much and tostring keeps 14 digits). This
-- file builds exactly one closure per call, `rare`, which builds the helpers of the rare paths
-- only when a script takes one.

-- The helpers of the rare paths (a block, a value a script cannot read), built only when a
-- script takes one: `rare().unreadable(key)`, `local r = rare()` for several.
--
-- Blocks. A blocked client's key holds a marker instead of its state, with a TTL that ends with
-- the block: the string 'b<until_us>', or for the sliding window log (a sorted set) the one
-- member 'b' scored until_us. Scripts look for it only where a value is not in their own format,
-- so the common path pays nothing for it. The block replaces the state: when it ends, the client
-- starts afresh. A marker whose time has come (the key outlives it by under 1 ms) is no state.
local function rare()
  local r = {}

  -- Charged while over (Envoy's rate limit service charges refused hits): `current` plus
  -- `added`, capped at `cap` (one more quota), or at `current` when that is further already.
  function r.charged_to(current, added, cap)
    return math.min(current + added, math.max(cap, current))
  end

  -- The time in µs of a `now` argument: µs since the Unix epoch, or "" for the server's clock
  -- (for control.lua and lease.lua; request.lua reads it for the algorithms).
  function r.now(arg)
    if arg == '' then
      local time = redis.call('TIME')
      return time[1] * 1000000 + time[2]
    end
    return tonumber(arg)
  end

  -- Stops the script at a value it cannot read (another program's data at a tollgate key, or a
  -- corrupt value), which is never overwritten. The store reports the error as this key's
  -- problem, not Redis's (StoreError::KeyState).
  function r.unreadable(key)
    error('tollgate: cannot read the state at ' .. key)
  end

  -- Until when the string `value` blocks (µs), or nil when it is not a marker.
  function r.block_until(value)
    local until_us = string.match(value, '^b(%d+)$')
    if until_us then
      return tonumber(until_us)
    end
    return nil
  end

  -- The reply to a request of `cost` at `now` by a client blocked until `until_us` under a
  -- capacity of `burst`: denied, nothing left, whole and allowed when the block ends (never,
  -- for a cost above the capacity).
  function r.blocked_reply(until_us, now, burst, cost)
    local rest = until_us - now
    if cost > burst then
      return {0, 0, rest, -1}
    end
    return {0, 0, rest, rest}
  end

  -- Until when the string `value` at `key` blocks (µs), or nil when that time has come: the
  -- value is no state. Stops the script when `value` is no marker either.
  function r.block_at(key, value, now)
    local until_us = r.block_until(value) or r.unreadable(key)
    if until_us > now then
      return until_us
    end
    return nil
  end

  -- Replaces the state at `key` by a block until `until_us` (a sorted set's when `zset`).
  function r.set_block(key, zset, until_us, now)
    local ms = math.ceil((until_us - now) / 1000)
    if zset then
      redis.call('DEL', key)
      redis.call('ZADD', key, string.format('%d', until_us), 'b')
      -- At least 2 ms: see the PEXPIRE in sliding_window_log.lua.
      redis.call('PEXPIRE', key, string.format('%d', math.max(ms, 2)))
    else
      redis.call('SET', key, string.format('b%d', until_us), 'PX',
        string.format('%d', math.max(ms, 1)))
    end
  end

  -- After an algorithm denied a request (`reply`; not in a dry run): when ARGV[8], block_for
  -- in µs, is there and above 0, and a wait could allow the request (retry_after >= 0), blocks
  -- the client from now for block_for and answers as the block does; else answers `reply`.
  function r.block_after(key, zset, argv, reply, now, burst, cost)
    local block_for = tonumber(argv[8])
    if argv[7] == '1' or not block_for or block_for <= 0 or reply[4] < 0 then
      return reply
    end
    local until_us = now + block_for
    r.set_block(key, zset, until_us, now)
    return r.blocked_reply(until_us, now, burst, cost)
  end

  -- Scales (src/algorithm/scale.rs). A bucket's state written under a client's own quota, in
  -- another scale than its rule's, is kept with that scale, its T and B: GCRA and the leaky
  -- bucket as 'tat:T:B', the token bucket as 'credit:updated_at:T:B'. A reader converts it to
  -- its own scale keeping the units used, and so does a reader in another scale than its
  -- rule's of a plain value (in the rule's scale, which the store then sends).
  --
  -- The numbers of a marked value with `parts` numbers separated by ':', or nil.
  function r.marked(value, parts)
    if parts == 3 then
      local a, b, c = string.match(value, '^(%d+):(%d+):(%d+)$')
      if a then
        return a + 0, b + 0, c + 0
      end
      return nil
    end
    local a, b, c, d = string.match(value, '^(%d+):(%d+):(%d+):(%d+)$')
    if a then
      return a + 0, b + 0, c + 0, d + 0
    end
    return nil
  end

  -- `us` µs of `from`'s interval as as many units of `to` µs each, rounded up, at most `cap`
  -- (as src/algorithm/scale.rs's `rescaled`, in the same doubles).
  function r.rescaled(us, from, to, cap)
    local converted = us
    if from ~= to then
      converted = math.ceil(us * to / math.max(from, 1))
    end
    if converted >= cap then
      return cap
    end
    return converted
  end

  -- A GCRA TAT kept in scale (from_t, from_b), read in (t, burst) at now (Gcra::rescale), and
  -- whether it was converted.
  function r.gcra_in(tat, from_t, from_b, t, burst, now)
    if from_t == t and from_b == burst then
      return tat, false
    end
    if tat > now then
      tat = now + r.rescaled(tat - now, math.max(from_t, 1), t, 2 * burst * t)
    end
    return tat, true
  end

  -- A token bucket's credit and updated_at kept in scale (from_t, from_b), read in
  -- (t, burst) at now (TokenBucket::rescale), and whether it was converted.
  function r.bucket_in(credit, at, from_t, from_b, t, burst, now)
    if from_t == t and from_b == burst then
      return credit, at, false
    end
    from_t = math.max(from_t, 1)
    local old_capacity = from_b * from_t
    local held = math.min(credit + math.max(now - at, 0), old_capacity)
    local used = old_capacity - held + math.max(at - now, 0)
    local capacity = burst * t
    used = r.rescaled(used, from_t, t, 2 * capacity)
    local spent = math.min(used, capacity)
    return capacity - spent, now + used - spent, true
  end

  return r
end
