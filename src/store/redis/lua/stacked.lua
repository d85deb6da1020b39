-- tollgate: stacked limits, one atomic decision of one request against several limits.
--
-- This file alone is not runnable: RedisStore assembles the script that EVALSHA runs, at
-- construction, as
--   <prelude.lua>
--   local ALGORITHMS = {}
--   ALGORITHMS[1] = function(KEYS, ARGV) <request.lua> <gcra.lua> end
--   ... one per algorithm, 1-based in Algorithm::ALL order: gcra, token_bucket, leaky_bucket,
--   fixed_window, fixed_window_from_first, sliding_window_log, sliding_window (leaky_bucket
--   runs GCRA's engine: ALGORITHMS[3] = ALGORITHMS[1]) ...
--   ALGORITHMS[8] = function(KEYS, ARGV) <request.lua> <plain_counter.lua> end
--   <this file>
-- so each algorithm's script runs unchanged as a function of its own KEYS and ARGV.
--
-- KEYS     one state key per check (as for that algorithm's own script); all keys of one
--          client share a hash tag (so, on Redis Cluster, one slot).
-- ARGV[1]  now in µs, or "" to read the server's clock once for every check
-- then 10 values per check i (ARGV[2 + 10*(i-1)] onwards):
--          algorithm index (1-based, Algorithm::ALL order; 8: a plain counter), L, P, B, T,
--          cost (>= 1),
--          flags (1: blocking, a denial blocks the request, else shadow mode, which never
--          blocks; + 2: charged, a denial still records its cost, see below), block_for in µs
--          (0: none; see below), and the rule's own T and B when the check's quota is another
--          (a client's own; see the algorithms' ARGV[9] and ARGV[10]), else 0 and 0
-- ARGV[2 + 10*n] (optional) "dry": decide every check and write nothing, blocked or not; the
--          cluster store's first phase when a stacked decision spans hash slots
-- Reply:   a flat array of 4 integers per check, in order, each as that algorithm's script
--          replies: allowed (1/0), remaining, reset_after_us, retry_after_us (-1 = none)
--
-- How: when no check is blocking, each runs once, for real, in order. Otherwise every check
-- is first decided in a dry run (ARGV[7] = "1": decides, writes nothing), all
-- at the same now. If a blocking check is denied, nothing is written and those decisions are
-- the reply. Otherwise each allowed check runs again for real with the same now, which decides
-- the same and stores it; denied checks (shadow ones) write nothing anyway.
-- When the request is blocked (and not dry), each blocking check that denied it, whose block_for
-- is above 0 and whose denial a wait could turn into an allow, blocks its own key for block_for
-- (see prelude.lua) unless a block is running there already, and replies as the block does.
-- A key named by two checks (the same limit twice) is decided the way two single calls would
-- decide it, the second seeing what the first consumed: its checks run for real in the first
-- pass, and if the request is blocked the key is put back as it was (DUMP, then RESTORE or DEL).
--
-- A charged check (Envoy's rate limit service counts every hit) that is denied records its cost
-- all the same (its algorithm's ARGV[7] = "c"): after the allowed ones are stored when the
-- request goes through, or, when it is blocked, on its key as it was before the request, in
-- the checks' order (src/store/memory/stacked.rs decides alike). A check that starts a block
-- keeps the block.
--
-- Every replica and the AOF see only the writes (scripts replicate their effects), so a dry run
-- costs reads only.

local n = #KEYS
local dry_only = #ARGV == 2 + 10 * n and ARGV[#ARGV] == 'dry'
if #ARGV ~= 1 + 10 * n and not dry_only then
  return redis.error_reply('tollgate stacked: expected 1 + 10 * ' .. n .. ' arguments, got ' .. #ARGV)
end

-- Every check decides at this one instant, passed on as an exact decimal string.
local now_arg = ARGV[1]
if now_arg == '' then
  local time = redis.call('TIME')
  now_arg = string.format('%d', time[1] * 1000000 + time[2])
end

-- Keys named by more than one check.
local seen, repeated = {}, {}
for i = 1, n do
  if seen[KEYS[i]] then
    repeated[KEYS[i]] = true
  end
  seen[KEYS[i]] = true
end

-- Check i's flags: whether its denial blocks the request, and whether it is charged.
local function blocking(i)
  local flags = ARGV[2 + 10 * (i - 1) + 6]
  return flags == '1' or flags == '3'
end
local function charged(i)
  local flags = ARGV[2 + 10 * (i - 1) + 6]
  return flags == '2' or flags == '3'
end

-- One check's run: its algorithm's script with its own KEYS and ARGV; `mode` is its ARGV[7]:
-- '1' a dry run, '0' writes, 'c' writes and charges a denial.
local function run(i, mode)
  local base = 2 + 10 * (i - 1)
  local algorithm = ALGORITHMS[tonumber(ARGV[base])]
  if not algorithm then
    return redis.error_reply('tollgate stacked: unknown algorithm ' .. tostring(ARGV[base]))
  end
  local argv = {ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4], ARGV[base + 5],
    now_arg, mode}
  if ARGV[base + 8] ~= '0' then
    -- Another quota than the rule's: its scale (block_for is the stacked script's own).
    argv[8], argv[9], argv[10] = '0', ARGV[base + 8], ARGV[base + 9]
  end
  return algorithm({KEYS[i]}, argv)
end

-- How check i runs for real: charging its denial or not.
local function real(i)
  if charged(i) then
    return 'c'
  end
  return '0'
end

-- Repeated keys as they were, to put back if the request is blocked.
-- No check can block the request (every hit charged, or only shadow limits): each runs once,
-- for real, in order; no dry run is needed.
local any_blocking = false
for i = 1, n do
  if blocking(i) then
    any_blocking = true
  end
end
if not any_blocking and not dry_only then
  local flat = {}
  for i = 1, n do
    local reply = run(i, real(i))
    if reply.err then
      return reply
    end
    for j = 1, 4 do
      flat[#flat + 1] = reply[j]
    end
  end
  return flat
end

local saved = {}
for key in pairs(repeated) do
  saved[key] = {redis.call('DUMP', key), redis.call('PTTL', key)}
end

local replies, blocked = {}, false
for i = 1, n do
  local mode = '1'
  if repeated[KEYS[i]] then
    mode = real(i)
  end
  local reply = run(i, mode)
  if reply.err then
    return reply
  end
  replies[i] = reply
  if reply[1] ~= 1 and blocking(i) then
    blocked = true
  end
end

if blocked or dry_only then
  for key, was in pairs(saved) do
    local dump, pttl = was[1], was[2]
    if dump then
      -- PTTL: -1 no expiry (RESTORE's 0); a key about to expire reads 0, which RESTORE would
      -- take as no expiry, hence at least 1 ms.
      local ttl = 0
      if pttl ~= -1 then
        ttl = math.max(pttl, 1)
      end
      redis.call('RESTORE', key, ttl, dump, 'REPLACE')
    else
      redis.call('DEL', key)
    end
  end
  if not dry_only then
    local r
    for i = 1, n do
      local base = 2 + 10 * (i - 1)
      local block_for = tonumber(ARGV[base + 7])
      if replies[i][1] ~= 1 and blocking(i) and block_for > 0 and replies[i][4] >= 0 then
        r = r or rare()
        local zset = tonumber(ARGV[base]) == 6
        local now = tonumber(now_arg)
        -- A block running already (this key named twice, or the denial was a block's) stays.
        local until_us
        if zset then
          until_us = tonumber(redis.call('ZSCORE', KEYS[i], 'b'))
        else
          local value = redis.call('GET', KEYS[i])
          until_us = value and r.block_until(value)
        end
        if not until_us or until_us <= now then
          until_us = now + block_for
          r.set_block(KEYS[i], zset, until_us, now)
        end
        replies[i] = r.blocked_reply(until_us, now, tonumber(ARGV[base + 3]),
          math.max(tonumber(ARGV[base + 5]), 1))
      elseif replies[i][1] ~= 1 and charged(i) and block_for == 0 then
        -- Charged on the key as it was: the reply stays the request's.
        run(i, 'c')
      end
    end
  end
else
  for i = 1, n do
    if not repeated[KEYS[i]] and (replies[i][1] == 1 or charged(i)) then
      run(i, real(i))
    end
  end
end

local flat = {}
for i = 1, n do
  for j = 1, 4 do
    flat[#flat + 1] = replies[i][j]
  end
end
return flat
