#!/usr/bin/env bash
# Redis server time per decision, each algorithm's script against two references:
# - the floor: the least any GCRA-like limiter can do in one script (read the clock, GET,
#   SET PX; no prelude);
# - a two-key token bucket shaped like Spring Cloud Gateway's (clock, two GETs, two SETEX).
#
# redis-benchmark replays the exact EVALSHA the store sends (`EVALSHA <sha> 1
# tollgate:<policy>:<algorithm>:{<client>} L P B T cost ""`, 1,000 clients, 100/min with burst
# 100, so most calls are allowed and write), and Redis reports the server time per call
# (`INFO commandstats`, usec_per_call of EVALSHA). Every script is measured once per round, the
# rounds interleaved; a ratio is taken within its round, and the table shows medians.
#
# Runs a private redis-server on a free port on 127.0.0.1 (installed from Debian's packages when
# missing) and stops it on exit. SCRIPT_COST_ROUNDS (default 5) and SCRIPT_COST_CALLS (default
# 50000 per script per round) set the size; about a minute with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${SCRIPT_COST_ROUNDS:-5}
calls=${SCRIPT_COST_CALLS:-50000}

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1; then
    echo "installing Debian's redis-server and redis-tools" >&2
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq redis-server redis-tools >/dev/null
fi

port=""
for _ in $(seq 1 50); do
    candidate=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
        port=$candidate
        break
    fi
done
[ -n "$port" ] || { echo "no free port found for redis-server" >&2; exit 1; }
work=$(mktemp -d)
cleanup() {
    if [ -f "$work/redis.pid" ]; then kill "$(cat "$work/redis.pid")" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" --daemonize yes --pidfile "$work/redis.pid" --logfile "$work/redis.log"
cli=(redis-cli -p "$port")
for _ in $(seq 1 50); do
    "${cli[@]}" ping >/dev/null 2>&1 && break
    sleep 0.1
done

# The floor: read the server's clock, GET, SET PX, and nothing else (no prelude).
floor="local time = redis.call('TIME')
local now = time[1] * 1000000 + time[2]
local value = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], string.format('%.0f', now), 'PX', 60000)
return {1, 0, 0, -1}"

# A token bucket in two keys (tokens, last refill in s), refilled by rate * elapsed, as Spring
# Cloud Gateway's request rate limiter keeps it. ARGV: rate per s, capacity, cost.
two_keys='local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now = tonumber(redis.call("TIME")[1])
local ttl = math.floor(capacity / rate * 2)
local tokens = tonumber(redis.call("GET", KEYS[1])) or capacity
local refilled = tonumber(redis.call("GET", KEYS[2])) or 0
tokens = math.min(capacity, tokens + math.max(0, now - refilled) * rate)
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call("SETEX", KEYS[1], ttl, tokens)
redis.call("SETEX", KEYS[2], ttl, now)
return {allowed, tokens}'

# The store's scripts (src/store/redis/lua/), each with the prelude and the request's reading in
# front, as the store sends them.
lua=src/store/redis/lua
names=(floor gcra token_bucket fixed_window fixed_window_from_first sliding_window_log sliding_window two_key_bucket)
declare -A sha
sha[floor]=$("${cli[@]}" SCRIPT LOAD "$floor")
for name in "${names[@]:1:6}"; do
    sha[$name]=$("${cli[@]}" SCRIPT LOAD "$(cat "$lua/prelude.lua"; echo; cat "$lua/request.lua"; echo; cat "$lua/$name.lua")")
done
sha[two_key_bucket]=$("${cli[@]}" SCRIPT LOAD "$two_keys")

# One measured run: prints the server µs per EVALSHA.
measure() {
    local name=$1
    local args
    if [ "$name" = two_key_bucket ]; then
        # 100/min is 1.67/s: rate 2/s, capacity 100.
        args=(2 "tollgate:cost:{__rand_int__}:tokens" "tollgate:cost:{__rand_int__}:ts" 2 100 1)
    else
        args=(1 "tollgate:cost:$name:{__rand_int__}" 100 60000000 100 600000 1 "")
    fi
    "${cli[@]}" FLUSHDB >/dev/null
    "${cli[@]}" CONFIG RESETSTAT >/dev/null
    redis-benchmark -p "$port" -n "$calls" -c 4 -P 16 -r 1000 -q \
        EVALSHA "${sha[$name]}" "${args[@]}" >/dev/null
    "${cli[@]}" INFO commandstats | tr -d '\r' |
        awk -F'[=,]' '/^cmdstat_evalsha:/ {
            if ($10 > 0) { print "EVALSHA failed " $10 " times" > "/dev/stderr"; exit 1 }
            print $6
        }'
}

results="$work/results"
for round in $(seq 1 "$rounds"); do
    echo "round $round of $rounds" >&2
    for name in "${names[@]}"; do
        echo "$round $name $(measure "$name")" >>"$results"
    done
done

# Per script: median µs, and the median and range of its ratio to the floor and to the
# two-key bucket in the same round.
awk -v rounds="$rounds" '
    function median(a, n,    i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { us[$1, $2] = $3; if (!($2 in seen)) { seen[$2] = 1; order[++count] = $2 } }
    END {
        printf "| script | µs per call | vs floor | floor range | vs two-key bucket |\n"
        printf "|---|---|---|---|---|\n"
        for (k = 1; k <= count; k++) {
            name = order[k]
            lo = 1e9; hi = 0
            for (r = 1; r <= rounds; r++) {
                t[r] = us[r, name]
                f[r] = us[r, name] / us[r, "floor"]
                s[r] = us[r, name] / us[r, "two_key_bucket"]
                if (f[r] < lo) lo = f[r]
                if (f[r] > hi) hi = f[r]
            }
            printf "| %s | %.2f | %.2f× | %.2f–%.2f× | %.2f× |\n", name, median(t, rounds), median(f, rounds), lo, hi, median(s, rounds)
        }
    }' "$results"
