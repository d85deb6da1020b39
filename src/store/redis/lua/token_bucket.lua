-- Token bucket: one decision, exactly as src/algorithm/token_bucket.rs makes it.
--
-- Tokens are integer credit in µs: one token is T µs, a full bucket B*T, and each elapsed µs
-- adds one µs of credit up to B*T. It admits exactly what GCRA admits.
--
-- KEYS[1]  the client's state key. Value: "<credit_us>:<updated_at_us>", the credit at the
--          last allowed request and when it was computed; a missing key is a full bucket. A
--          bucket counted in another scale than the rule's (a client's own quota) is
--          "<credit_us>:<updated_at_us>:T:B" (see prelude.lua).
-- ARGV[1]  L: limit, requests per period (not needed here; every script takes the same ARGV)
-- ARGV[2]  P: period, µs (not needed here)
-- ARGV[3]  B: burst, the bucket capacity in tokens
-- ARGV[4]  T: µs per token (ceil(P / L))
-- ARGV[5]  cost in tokens, >= 1
-- ARGV[6]  now, µs since the Unix epoch, or "" to use the server's clock
-- ARGV[7]  optional: "1" for a dry run that decides exactly as usual but writes nothing (used
--          by stacked.lua to decide stacked limits before consuming any); absent: writes;
--          "c": writes, and a denial is charged (src/algorithm/token_bucket.rs, `record`).
-- ARGV[8]  optional: block_for, µs. When above 0, a denial that a wait could turn into an allow
--          (not in a dry run) blocks the client for block_for from now, and the reply is the
--          block's; the key holds a block marker (see prelude.lua) until it ends.
-- ARGV[9], ARGV[10]  optional: the rule's own T and B, sent when this decision's quota is
--          another (ARGV[7] and ARGV[8] are then sent too): a plain bucket is read in that
--          scale, and the bucket is written with this decision's. A bucket read in another
--          scale than this decision's is converted, keeping the units used, and written back
--          even when the request is denied (not in a dry run).
-- Reply:   {allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)}
--          retry_after is -1 when allowed, and when cost > B (never allowed).
--
-- Calls: the server's clock (only when ARGV[6] is ""), one GET, and one SET ... PX on allow (not
-- in a dry run).
-- A denial writes nothing unless charged. The TTL is ceil(time until the bucket is full /
-- 1000) ms.
--
-- By hand (after prelude.lua, the rare paths' helpers, and request.lua, which reads
-- ARGV and the clock), 10/s with burst 20
-- (T = 100000 µs), cost 1, server time:
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/request.lua src/store/redis/lua/token_bucket.lua)" 1 'tollgate:api:tb:{10.0.0.1}' 10 1000000 20 100000 1 ''

-- Kept lean on purpose: see prelude.lua.

local capacity = burst * t
-- pending: how far now lies before updated_at (a clock that went back); refill starts then.
local credit, pending, updated_at = capacity, 0, now
-- Whether the bucket was read in another scale (see prelude.lua), and so is written back.
local rescaled = false
local value = redis.call('GET', KEYS[1])
if value then
  local stored, at = string.match(value, '^(%d+):(%d+)$')
  if stored then
    stored, at = stored + 0, at + 0
    if ARGV[9] then
      stored, at, rescaled = rare().bucket_in(stored, at, ARGV[9] + 0, ARGV[10] + 0, t, burst, now)
    end
  else
    local r = rare()
    local kept, kept_at, from_t, from_b = r.marked(value, 4)
    if kept then
      stored, at, rescaled = r.bucket_in(kept, kept_at, from_t, from_b, t, burst, now)
    end
  end
  if stored then
    -- min(stored + max(now - at, 0), capacity)
    credit = stored
    if now > at then
      credit = stored + now - at
    end
    if credit > capacity then
      credit = capacity
    end
    if at > now then
      pending = at - now
      updated_at = at
    end
  else
    -- Not a bucket: a block (see prelude.lua), or data that is not ours.
    local r = rare()
    local until_us = r.block_at(KEYS[1], value, now)
    if until_us then
      return r.blocked_reply(until_us, now, burst, cost)
    end
  end
end

-- The value a bucket is written as: marked with this decision's scale when it is not the
-- rule's.
local format = '%d:%d'
if ARGV[9] then
  format = '%d:%d:' .. string.format('%d:%d', t, burst)
end

local need = cost * t
-- A look (cost 0) is refused only in debt: more refill pending than credit in hand.
local in_debt = cost == 0 and pending > credit
if cost > burst or credit < need or in_debt then
  local retry_after = -1
  if in_debt then
    retry_after = pending - credit
  elseif cost <= burst then
    retry_after = need - credit + pending
  end
  local reply = {0, math.floor(credit / t), capacity - credit + pending, retry_after}
  if ARGV[7] == 'c' then
    -- Charged while over (src/algorithm/token_bucket.rs, `record`): the bucket is left empty
    -- and its refill starts later by the debt, at most B * T (a later start stays).
    local debt, most = pending + need - credit, capacity
    if pending - credit > most then
      most = pending - credit
    end
    if debt > most then
      debt = most
    end
    redis.call('SET', KEYS[1], string.format(format, 0, now + debt), 'PX',
      string.format('%d', math.ceil((capacity + debt) / 1000)))
    return reply
  end
  if ARGV[8] then
    local answer = rare().block_after(KEYS[1], false, ARGV, reply, now, burst, cost)
    if answer ~= reply then
      -- A block replaced the state.
      return answer
    end
  end
  if rescaled and ARGV[7] ~= '1' and reply[3] > 0 then
    -- Converted: kept in this decision's scale from now on.
    redis.call('SET', KEYS[1], string.format(format, credit, updated_at), 'PX',
      string.format('%d', math.ceil(reply[3] / 1000)))
  end
  return reply
end
credit = credit - need
local reset_after = capacity - credit + pending
if ARGV[7] ~= '1' then
  -- The TTL: ceil(reset_after / 1000) ms, at least 1 (reset_after >= need >= 1).
  redis.call('SET', KEYS[1], string.format(format, credit, updated_at), 'PX',
    string.format('%d', math.ceil(reset_after / 1000)))
end
return {1, math.floor(credit / t), reset_after, -1}
