-- tollgate: a quota set for one client under one rule at run time (Control::set_quota), read,
-- set or cleared in one call, so that every instance on this Redis sees it.
--
-- KEYS[1]  the override's key: <prefix>:<rule>:quota:{<client key>}. Value: "L:P:B", the
--          limit, the period in µs and the burst (0: none), in decimal.
-- ARGV[1]  "get", "set" or "clear"
-- ARGV[2..4]  set: L, P (µs), B (0: none)
-- ARGV[5]  set: how long it holds, in ms (0: until cleared)
-- Reply:   get: {L, P, B}, or {} when none is set; set and clear: {1}
--
-- By hand (after lua/prelude.lua): give the client "key-1" of the rule "api" 50 per 10 s for
-- an hour, then read it:
--   redis-cli EVAL "$(cat src/store/redis/lua/prelude.lua src/store/redis/lua/quota.lua)" 1 'tollgate:api:quota:{key-1}' set 50 10000000 0 3600000
--   redis-cli GET 'tollgate:api:quota:{key-1}'

local key = KEYS[1]
local op = ARGV[1]
if op == 'get' then
  local value = redis.call('GET', key)
  if not value then
    return {}
  end
  local l, p, b = string.match(value, '^(%d+):(%d+):(%d+)$')
  if not l then
    rare().unreadable(key)
  end
  return {tonumber(l), tonumber(p), tonumber(b)}
end
if op == 'set' then
  local value = string.format('%d:%d:%d', ARGV[2] + 0, ARGV[3] + 0, ARGV[4] + 0)
  local ms = ARGV[5] + 0
  if ms > 0 then
    redis.call('SET', key, value, 'PX', string.format('%d', ms))
  else
    redis.call('SET', key, value)
  end
  return {1}
end
if op == 'clear' then
  redis.call('DEL', key)
  return {1}
end
return redis.error_reply('tollgate quota: unknown operation ' .. tostring(op))
