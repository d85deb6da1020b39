-- GCRA (generic cell rate algorithm): one decision, exactly as src/algorithm/gcra.rs makes it.
-- It serves the leaky bucket too, which decides exactly alike (see src/algorithm/gcra.rs): the
-- queue's last slot is TAT - T.
--
-- KEYS[1]  the client's state key. Value: the TAT (theoretical arrival time, µs) as a decimal
--          string (read with tonumber: any value it reads as a non-negative integer is a TAT);
--          a missing key is a client with no history (a full bucket). A TAT counted in another
--          scale than the rule's (a client's own quota) is 'tat:T:B' (see prelude.lua).
-- ARGV[1]  L: limit, requests per period (not needed here; every script takes the same ARGV)
-- ARGV[2]  P: period, µs (not needed here)
-- ARGV[3]  B: burst, the bucket capacity in requests
-- ARGV[4]  T: emission interval, µs (ceil(P / L))
-- ARGV[5]  cost, >= 1
-- ARGV[6]  now, µs since the Unix epoch, or "" to use the server's clock
-- ARGV[7]  optional: "1" for a dry run that decides exactly as usual but writes nothing (used
--          by stacked.lua to decide stacked limits before consuming any); absent: writes;
--          "c": writes, and a denial is charged (src/algorithm/gcra.rs, `record`): the TAT
--          moves on by cost * T into debt, to at most 2 * B * T ahead of now.
-- ARGV[8]  optional: block_for, µs. When above 0, a denial that a wait could turn into an allow
--          (not in a dry run) blocks the client for block_for from now, and the reply is the
--          block's; the key holds a block marker (see prelude.lua) until it ends.
-- ARGV[9], ARGV[10]  optional: the rule's own T and B, sent when this decision's quota is
--          another (ARGV[7] and ARGV[8] are then sent too): a plain TAT is read in that scale,
--          and the TAT is written as 'tat:T:B' in this decision's. A TAT read in another scale
--          than this decision's is converted, keeping the units used, and written back even
--          when the request is denied (not in a dry run).
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--          retry_after is -1 when allowed, and when cost > B (never allowed).
--
-- Calls: the server's clock (only when ARGV[6] is ""), one GET, and one SET ... PX on allow (not
-- in a dry run).
-- A denial writes nothing unless charged. The TTL is ceil((TAT - now) / 1000) ms: the key
-- lives exactly as long as it decides differently from a new one.
--
-- By hand (after prelude.lua, the rare paths' helpers, and request.lua, which reads
-- ARGV and the clock), 10/s with burst 20
-- (T = 100000 µs), cost 1, server time:
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/request.lua src/store/redis/lua/gcra.lua)" 1 'tollgate:api:gcra:{10.0.0.1}' 10 1000000 20 100000 1 ''
--   redis-cli SCRIPT LOAD "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/request.lua src/store/redis/lua/gcra.lua)"    # prints the sha, then:
--   redis-cli EVALSHA <sha> 1 'tollgate:api:gcra:{10.0.0.1}' 10 1000000 20 100000 1 ''

-- Kept lean on purpose (see prelude.lua): Redis runs scripts one at a time, so this
-- script's server time is the limiter's ceiling.

local capacity = burst * t
local value = redis.call('GET', KEYS[1])
local tat = 0
-- Whether the TAT was read in another scale (see prelude.lua), and so is written back.
local rescaled = false
if value then
  tat = tonumber(value)
  if not tat or tat < 0 or tat % 1 ~= 0 then
    -- Not a TAT (a non-negative integer): one in another scale, a block (see
    -- prelude.lua), or data that is not ours.
    local r = rare()
    local kept, from_t, from_b = r.marked(value, 3)
    if kept then
      tat, rescaled = r.gcra_in(kept, from_t, from_b, t, burst, now)
    else
      local until_us = r.block_at(KEYS[1], value, now)
      if until_us then
        return r.blocked_reply(until_us, now, burst, cost)
      end
      tat = 0
    end
  elseif ARGV[9] then
    tat, rescaled = rare().gcra_in(tat, ARGV[9] + 0, ARGV[10] + 0, t, burst, now)
  end
end
-- The value a TAT is written as: marked with this decision's scale when it is not the rule's.
local format = '%d'
if ARGV[9] then
  format = '%d:' .. string.format('%d:%d', t, burst)
end
-- max(tat, now) - now: the part of the bucket in use now.
local backlog = tat - now
if backlog < 0 then
  backlog = 0
end

if cost > burst then
  -- Never allowed.
  local free = capacity - backlog
  if free < 0 then
    free = 0
  end
  if ARGV[7] == 'c' then
    -- Charged while over: the same debt as below.
    local after = rare().charged_to(backlog, cost * t, 2 * capacity)
    redis.call('SET', KEYS[1], string.format(format, now + after), 'PX',
      string.format('%d', math.ceil(after / 1000)))
  elseif rescaled and ARGV[7] ~= '1' and backlog > 0 then
    redis.call('SET', KEYS[1], string.format(format, now + backlog), 'PX',
      string.format('%d', math.ceil(backlog / 1000)))
  end
  return {0, math.floor(free / t), backlog, -1}
end
-- new - now
local after = backlog + cost * t
if after > capacity then
  local free = capacity - backlog
  if free < 0 then
    free = 0
  end
  local reply = {0, math.floor(free / t), backlog, after - capacity}
  if ARGV[7] == 'c' then
    -- Charged while over: into debt, to at most 2 * B * T ahead of now (a TAT already
    -- further, from a clock that went back, stays).
    after = rare().charged_to(backlog, cost * t, 2 * capacity)
    redis.call('SET', KEYS[1], string.format(format, now + after), 'PX',
      string.format('%d', math.ceil(after / 1000)))
    return reply
  end
  if ARGV[8] then
    local answer = rare().block_after(KEYS[1], false, ARGV, reply, now, burst, cost)
    if answer ~= reply then
      -- A block replaced the state.
      return answer
    end
  end
  if rescaled and ARGV[7] ~= '1' and backlog > 0 then
    -- Converted: kept in this decision's scale from now on.
    redis.call('SET', KEYS[1], string.format(format, now + backlog), 'PX',
      string.format('%d', math.ceil(backlog / 1000)))
  end
  return reply
end
if ARGV[7] ~= '1' then
  -- The TTL: ceil(after / 1000) ms, at least 1 (after >= t >= 1).
  redis.call('SET', KEYS[1], string.format(format, now + after), 'PX',
    string.format('%d', math.ceil(after / 1000)))
end
return {1, math.floor((capacity - after) / t), after, -1}
