-- tollgate: leases for hot keys. Leases units of quota, or gives unused ones back, exactly as
-- src/algorithm/lease.rs does, on the same keys and values as each algorithm's own script.
--
-- KEYS[1]  the client's state key under the policy (as the algorithm's script reads it)
-- ARGV[1]  the algorithm: 1 gcra, 2 token_bucket, 3 leaky_bucket, 4 fixed_window,
--          5 fixed_window_from_first (the sliding windows cannot lease)
-- ARGV[2]  L: limit per period          ARGV[3]  P: period, µs
-- ARGV[4]  B: burst                     ARGV[5]  T: emission interval, µs (ceil(P / L))
-- ARGV[6]  "acquire" or "release"
-- ARGV[7]  acquire: min, the fewest units worth leasing (>= 1); release: unused units
-- ARGV[8]  acquire: max, the most units to lease (>= min); release: the lease's mark
-- ARGV[9]  now, µs since the Unix epoch, or "" to use the server's clock
-- ARGV[10], ARGV[11]  optional: the rule's own T and B, when the policy's quota is another
--          (a client's own): a bucket's state is then read in the rule's scale when plain, and
--          written marked with the policy's (see prelude.lua, and the algorithms' scripts).
--          A bucket read in another scale than the policy's is converted, keeping the units
--          used, and written back in the policy's.
-- Reply:   acquire: {granted, remaining, reset_after_us, retry_after_us (-1 = none), mark}
--            granted is as many units as fit back to back now, at most max; 0 if fewer than
--            min fit, with the reply a request of cost min would get. The mark is the lease's
--            end in the TAT's time (buckets) or its window's start (fixed windows).
--          release: {units taken back}
--
-- Buckets: a lease of g stores the state as g allowed requests; giving back u units at now
-- moves the TAT back by min(u*T, mark - now), by nothing if that is negative, never before now
-- (units whose slots have drained were refilled by time itself). Fixed windows: units come back
-- only while the lease's window lasts.
--
-- Calls: the server's clock (only when ARGV[9] is ""), one GET, and at most one SET or DEL.
-- A client blocked under the policy (a marker in its key) gets no lease until the block ends.
--
-- By hand (after prelude.lua), a lease of 1 to 100 units of 20000/s by GCRA:
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/lease.lua)" 1 'tollgate:global:gcra:{global}' 1 20000 1000000 20000 50 acquire 1 100 ''

local key = KEYS[1]
local algorithm = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local period = math.max(tonumber(ARGV[3]), 1)
local burst = tonumber(ARGV[4])
local t = math.max(tonumber(ARGV[5]), 1)
local acquire = ARGV[6] == 'acquire'
local a = tonumber(ARGV[7])
local b = tonumber(ARGV[8])
local r = rare()
local now = r.now(ARGV[9])
local raw = redis.call('GET', key)
local home_t, home_b = tonumber(ARGV[10]), tonumber(ARGV[11])
-- How a bucket's numbers are written: marked with the policy's scale when not the rule's.
local mark = ''
if home_t then
  mark = string.format(':%d:%d', t, burst)
end

-- A blocked client (see prelude.lua) is leased nothing and given nothing back: the block
-- replaced the state the lease came from. A marker whose time has come is no state.
local blocked_until = raw and r.block_until(raw)
if blocked_until then
  if blocked_until > now then
    if acquire then
      local reply = r.blocked_reply(blocked_until, now, burst, math.max(a, 1))
      reply[5] = 0
      return reply
    end
    return {0}
  end
  raw = nil
end

if algorithm == 1 or algorithm == 3 then
  -- GCRA and the leaky bucket: the TAT.
  local capacity = burst * t
  local tat, rescaled = 0, false
  if raw then
    if string.find(raw, '^%d+$') then
      tat = tonumber(raw)
      if home_t then
        tat, rescaled = r.gcra_in(tat, home_t, home_b, t, burst, now)
      end
    else
      local kept, from_t, from_b = r.marked(raw, 3)
      if not kept then
        r.unreadable(key)
      end
      tat, rescaled = r.gcra_in(kept, from_t, from_b, t, burst, now)
    end
  end
  -- A TAT read in another scale is kept in the policy's, whatever else happens.
  local function keep_rescaled()
    if rescaled and tat > now then
      redis.call('SET', key, string.format('%d', tat) .. mark, 'PX',
        string.format('%d', math.ceil((tat - now) / 1000)))
    end
  end
  if acquire then
    local min, max = math.max(a, 1), math.max(b, a, 1)
    local backlog = math.max(tat - now, 0)
    local fit = math.floor(math.max(capacity - backlog, 0) / t)
    if min > burst then
      keep_rescaled()
      return {0, fit, backlog, -1, 0}
    end
    local granted = math.min(max, fit)
    if granted < min then
      keep_rescaled()
      return {0, fit, backlog, backlog + min * t - capacity, 0}
    end
    local after = backlog + granted * t
    redis.call('SET', key, string.format('%d', now + after) .. mark, 'PX',
      string.format('%d', math.ceil(after / 1000)))
    return {granted, math.floor((capacity - after) / t), after, -1, now + after}
  end
  if b <= now or tat <= now then
    keep_rescaled()
    return {0}
  end
  local back = math.min(a * t, b - now)
  local new = math.max(tat - back, now)
  if new > now then
    redis.call('SET', key, string.format('%d', new) .. mark, 'PX',
      string.format('%d', math.ceil((new - now) / 1000)))
  else
    redis.call('DEL', key)
  end
  return {math.floor((tat - new) / t)}
end

if algorithm == 2 then
  -- Token bucket: "<credit_us>:<updated_at_us>".
  local capacity = burst * t
  local credit, pending, updated_at = capacity, 0, now
  local rescaled = false
  if raw then
    local stored, at = string.match(raw, '^(%d+):(%d+)$')
    if stored then
      stored, at = tonumber(stored), tonumber(at)
      if home_t then
        stored, at, rescaled = r.bucket_in(stored, at, home_t, home_b, t, burst, now)
      end
    else
      local kept, kept_at, from_t, from_b = r.marked(raw, 4)
      if not kept then
        r.unreadable(key)
      end
      stored, at, rescaled = r.bucket_in(kept, kept_at, from_t, from_b, t, burst, now)
    end
    credit = math.min(stored + math.max(now - at, 0), capacity)
    pending = math.max(at - now, 0)
    updated_at = math.max(at, now)
  end
  -- A bucket read in another scale is kept in the policy's, whatever else happens.
  local function keep_rescaled()
    local reset_after = capacity - credit + pending
    if rescaled and reset_after > 0 then
      redis.call('SET', key, string.format('%d:%d', credit, updated_at) .. mark, 'PX',
        string.format('%d', math.ceil(reset_after / 1000)))
    end
  end
  if acquire then
    local min, max = math.max(a, 1), math.max(b, a, 1)
    local granted = math.min(max, math.floor(credit / t))
    if min > burst or granted < min then
      local retry_after = -1
      if min <= burst then
        retry_after = min * t - credit + pending
      end
      keep_rescaled()
      return {0, math.floor(credit / t), capacity - credit + pending, retry_after, 0}
    end
    credit = credit - granted * t
    local reset_after = capacity - credit + pending
    redis.call('SET', key, string.format('%d:%d', credit, updated_at) .. mark, 'PX',
      string.format('%d', math.ceil(reset_after / 1000)))
    return {granted, math.floor(credit / t), reset_after, -1, now + reset_after}
  end
  if not raw or b <= now then
    keep_rescaled()
    return {0}
  end
  local back = math.min(a * t, b - now)
  local returned = math.min(credit + back, capacity)
  local reset_after = capacity - returned + pending
  if reset_after > 0 then
    redis.call('SET', key, string.format('%d:%d', returned, updated_at) .. mark, 'PX',
      string.format('%d', math.ceil(reset_after / 1000)))
  else
    redis.call('DEL', key)
  end
  return {math.floor((returned - credit) / t)}
end

-- The fixed windows: "w<start>:<count>" (aligned) or "f<start>:<count>" (from first).
local tag = 'w'
if algorithm == 5 then
  tag = 'f'
end
local start, count = 0, 0
if raw then
  local s, c = string.match(raw, '^' .. tag .. '(%d+):(%d+)$')
  if not s then
    r.unreadable(key)
  end
  start, count = tonumber(s), tonumber(c)
end
if acquire then
  local min, max = math.max(a, 1), math.max(b, a, 1)
  local current, new_start
  if algorithm == 4 then
    new_start = now - now % period
    current = count > 0 and new_start <= start
  else
    new_start = now
    current = count > 0 and now < start + period
  end
  if not current then
    start, count = new_start, 0
  end
  local window_end = start + period
  local fit = math.max(limit - count, 0)
  local granted = math.min(max, fit)
  if min > limit or granted < min then
    local retry_after = -1
    if min <= limit then
      retry_after = math.max(window_end - now, 0)
    end
    local reset_after = 0
    if count > 0 then
      reset_after = math.max(window_end - now, 0)
    end
    return {0, fit, reset_after, retry_after, 0}
  end
  count = count + granted
  redis.call('SET', key, string.format('%s%d:%d', tag, start, count), 'PX',
    string.format('%d', math.max(math.ceil((window_end - now) / 1000), 1)))
  return {granted, limit - count, math.max(window_end - now, 0), -1, start}
end
if not (count > 0 and start == b and now < start + period) then
  return {0}
end
local taken = math.min(a, count)
count = count - taken
if count > 0 then
  redis.call('SET', key, string.format('%s%d:%d', tag, start, count), 'PX',
    string.format('%d', math.max(math.ceil((start + period - now) / 1000), 1)))
else
  redis.call('DEL', key)
end
return {taken}
