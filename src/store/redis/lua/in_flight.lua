-- tollgate: requests in flight (Rule::in_flight, InFlight). One call takes a slot, one gives it
-- back, and one renews the leases of the slots an instance holds.
--
-- A client's slots under one limit are a sorted set at its key,
-- <prefix>:<limit name>:slots:{<client key>}: each member is a slot's id (a decimal number the
-- instance that took it chose, unique across instances), scored by when the slot's lease ends
-- (µs since the Unix epoch). A slot whose lease has ended no longer counts, so the slots of an
-- instance that crashed come back by themselves; a living instance renews the leases of the
-- slots it holds every third of their time to live. The key expires with its last lease.
--
-- ARGV[1]  the operation: "take", "give" or "renew"
-- ARGV[2]  now, µs since the Unix epoch, or "" to use the server's clock
--
-- take:   KEYS[1] the client's slots; ARGV[3] max, the slots a client may hold;
--         ARGV[4] ttl, µs; ARGV[5] the slot's id.
--         Drops the slots whose lease has ended, then adds this one until now + ttl if fewer
--         than max are held.
--         Reply: {taken (1 or 0), slots held afterwards}
-- give:   KEYS[1] the client's slots; ARGV[3] the slot's id.
--         Reply: {slots held afterwards}
-- renew:  KEYS[1..n] clients' slots; from ARGV[3], for each key in order: its ttl (µs), the
--         number m of ids that follow, then those m ids.
--         Moves each listed slot whose lease has not ended on to now + ttl (a slot whose lease
--         ended is not taken again: it may be someone else's now).
--         Reply: {slots renewed}
--
-- Calls: take: ZREMRANGEBYSCORE, ZCARD, and on success ZADD, PTTL and perhaps PEXPIRE; give:
-- ZREM and ZCARD; renew: ZSCORE and ZADD per slot, PTTL and perhaps PEXPIRE per key.
--
-- By hand (after lua/prelude.lua), take slot 42 of 3 for 30 s, then give it back:
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/in_flight.lua)" 1 'tollgate:slow:slots:{alice}' take '' 3 30000000 42
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/in_flight.lua)" 1 'tollgate:slow:slots:{alice}' give '' 42

local op = ARGV[1]
local now = rare().now(ARGV[2])

-- Keeps `key` at least until `until_us`, when its last lease ends.
local function expire_at(key, until_us)
  local ms = math.ceil((until_us - now) / 1000)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, string.format('%d', ms))
  end
end

if op == 'take' then
  local key = KEYS[1]
  local max = tonumber(ARGV[3])
  local until_us = now + tonumber(ARGV[4])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
  local held = redis.call('ZCARD', key)
  if held >= max then
    return {0, held}
  end
  redis.call('ZADD', key, string.format('%d', until_us), ARGV[5])
  expire_at(key, until_us)
  return {1, held + 1}
elseif op == 'give' then
  local key = KEYS[1]
  redis.call('ZREM', key, ARGV[3])
  return {redis.call('ZCARD', key)}
elseif op == 'renew' then
  local renewed = 0
  local i = 3
  for _, key in ipairs(KEYS) do
    local until_us = now + tonumber(ARGV[i])
    local m = tonumber(ARGV[i + 1])
    local any = false
    for j = i + 2, i + 1 + m do
      local score = redis.call('ZSCORE', key, ARGV[j])
      if score and tonumber(score) > now then
        redis.call('ZADD', key, string.format('%d', until_us), ARGV[j])
        renewed = renewed + 1
        any = true
      end
    end
    if any then
      expire_at(key, until_us)
    end
    i = i + 2 + m
  end
  return {renewed}
end
return redis.error_reply('tollgate in_flight: unknown operation ' .. tostring(op))
