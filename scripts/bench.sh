#!/usr/bin/env bash
# Throughput under wrk, side by side: the quickstart with no layer, with tollgate's memory store
# (with its default headers, and with HEADERS=none) and with its Redis store, and the same server
# limited by tower_governor (examples/governor_server.rs, without and with its headers); each
# with random keys (nothing denied) and with one flooded key (nearly everything denied). Prints
# one Markdown table.
#
# Everything runs on 127.0.0.1: the servers, wrk, and a private redis-server on a free port.
# wrk and redis-server are installed from Debian's packages when missing. Every process started
# here is stopped on exit. Too slow and noisy for scripts/test.sh: run it by hand.
#
# BENCH_SECONDS (default 3) is the length of each measured wrk run; BENCH_ROUNDS (default 5)
# how many times every setup is measured, interleaved, reporting the median (about 5 minutes).
#
# Then the hot-key run (issue 13), alone with `scripts/bench.sh hot`: two quickstart instances
# share one global "20000/1s" limit through Redis (RULES_FILE with key = "global" and
# lease = "auto"), wrk with 32 connections on each for 5 s; it prints what was allowed against
# the bounds (at most 20000 × s + 20000, at least 0.9 × 20000 × (s − 0.5)), Redis calls per
# request (target at most 0.05) and any status other than 200 and 429, and the same run
# without the lease for comparison. BENCH_HOT_QUOTA (default 20000) changes the limit, e.g. to
# load it above its quota on a machine too busy to send 20,000 requests a second.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-3}
rounds=${BENCH_ROUNDS:-5}
connections=32
threads=2
random_quota="1000000/1s"
flood_quota="5/10s"

install_missing() {
    local missing=()
    command -v wrk >/dev/null 2>&1 || missing+=(wrk)
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    [ ${#missing[@]} -eq 0 ] && return
    echo "installing Debian's ${missing[*]}" >&2
    local sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
}

# A port nothing answers on, below Linux's range for outgoing connections (32768 and up), so
# wrk's own connections never take it between this check and the server's bind.
free_port() {
    local candidate
    for _ in $(seq 1 50); do
        candidate=$((20000 + RANDOM % 12000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    echo "no free port found" >&2
    exit 1
}

install_missing
cargo build --release --quiet --example quickstart --example governor_server
bin="${CARGO_TARGET_DIR:-target}/release/examples"

work=$(mktemp -d)
server_pid=""
server_port=""
hot_pids=()
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
    for pid in "${hot_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [ -f "$work/redis.pid" ]; then kill "$(cat "$work/redis.pid")" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" --daemonize yes --pidfile "$work/redis.pid" --logfile "$work/redis.log"
for _ in $(seq 1 50); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.1
done
redis_url="redis://127.0.0.1:$redis_port"


# A new random client on every request; each wrk thread seeds its own generator.
cat >"$work/random.lua" <<'LUA'
local threads = 0
function setup(thread)
    threads = threads + 1
    thread:set("id", threads)
end
function init(args)
    math.randomseed(os.time() * 100 + id)
end
function request()
    wrk.headers["x-api-key"] = "client-" .. math.random(1, 1000000000)
    return wrk.format()
end
LUA
# One client, always the same.
cat >"$work/flood.lua" <<'LUA'
wrk.headers["x-api-key"] = "flooder"
LUA

# Starts a server (an example binary with the given environment) on a free port, sets
# $server_port, and waits until it listens. Tries another port if another process took this one.
start_server() {
    local binary=$1
    shift
    for _ in 1 2 3; do
        server_port=$(free_port)
        : >"$work/server.log"
        env RUST_LOG=warn PORT="$server_port" "$@" "$bin/$binary" >"$work/server.log" 2>&1 &
        server_pid=$!
        for _ in $(seq 1 100); do
            grep -q "listening on" "$work/server.log" && return
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        stop_server
        grep -q "Address already in use" "$work/server.log" || break
    done
    echo "$binary did not start:" >&2
    cat "$work/server.log" >&2
    exit 1
}

stop_server() {
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

# Runs wrk for $1 seconds with the Lua script $2 against the port $3; the report goes to stdout.
run_wrk() {
    timeout $(($1 + 30)) wrk -t"$threads" -c"$connections" -d"$1s" --timeout 2s \
        -s "$work/$2.lua" "http://127.0.0.1:$3/"
}

redis_stat() {
    redis-cli -p "$redis_port" "$@" >/dev/null
}

# Calls the store sent Redis (scripts, script loads and pings; commandstats also counts the
# commands a script runs inside, which are not calls), and the EVALSHA calls and their total
# server µs (the script's whole run).
redis_counts() {
    redis-cli -p "$redis_port" info commandstats | tr -d '\r' | awk -F'[:=,]' '
        $1 ~ /^cmdstat_(evalsha|eval|evalsha_ro|eval_ro|fcall|fcall_ro|ping|script\|.*)$/ { calls += $3 }
        $1 == "cmdstat_evalsha" { evalsha = $3; usec = $5 }
        END { printf "%d %d %d\n", calls, evalsha, usec }'
}

# The hot-key run: prints one paragraph per setup (with and without the lease).
hot_seconds=5
hot_quota=${BENCH_HOT_QUOTA:-20000}
cat >"$work/status.lua" <<'LUA'
-- Counts statuses: 200, 429 and anything else (wrk itself only counts non-2xx).
local threads = {}
function setup(thread)
    table.insert(threads, thread)
end
function init(args)
    ok, denied, other = 0, 0, 0
end
function response(status, headers, body)
    if status == 200 then
        ok = ok + 1
    elseif status == 429 then
        denied = denied + 1
    else
        other = other + 1
    end
end
function done(summary, latency, requests)
    local o, d, x = 0, 0, 0
    for _, t in ipairs(threads) do
        o, d, x = o + t:get("ok"), d + t:get("denied"), x + t:get("other")
    end
    io.write(string.format("statuses: %d %d %d\n", o, d, x))
end
LUA

hot_key() {
    local lease_line=$1 label=$2
    printf '[[rule]]\nname = "global"\nquota = "%s/1s"\nkey = "global"\n%s\n' \
        "$hot_quota" "$lease_line" >"$work/hot.toml"
    redis-cli -p "$redis_port" flushall >/dev/null
    local ports=()
    hot_pids=()
    for i in 1 2; do
        start_server quickstart REDIS_URL="$redis_url" RULES_FILE="$work/hot.toml"
        hot_pids+=("$server_pid")
        ports+=("$server_port")
        server_pid=""
    done
    redis_stat config resetstat
    local wrk_pids=()
    for i in 0 1; do
        timeout $((hot_seconds + 30)) wrk -t1 -c32 -d"${hot_seconds}s" --timeout 2s \
            -s "$work/status.lua" "http://127.0.0.1:${ports[$i]}/" >"$work/hot.$i" &
        wrk_pids+=($!)
    done
    wait "${wrk_pids[@]}"
    read -r calls _ _ <<<"$(redis_counts)"
    for pid in "${hot_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    hot_pids=()
    awk -v calls="$calls" -v quota="$hot_quota" -v label="$label" '
        /^statuses:/ { ok += $2; denied += $3; other += $4 }
        / requests in / { s = $4; sub(/s,$/, "", s); if (s + 0 > secs) secs = s + 0 }
        END {
            requests = ok + denied + other
            printf "%s: allowed %d of %d requests in %.2f s (at most %d, at least %d); %.0f/s\n",
                label, ok, requests, secs, quota * secs + quota, 0.9 * quota * (secs - 0.5),
                ok / secs
            printf "  Redis calls: %d, %.4f per request (target at most 0.05); statuses other than 200/429: %d\n",
                calls, calls / requests, other
        }' "$work/hot.0" "$work/hot.1"
}

run_hot_keys() {
    echo
    echo "hot key: two quickstart instances, one global ${hot_quota}/1s limit in Redis, wrk -t1 -c32 -d${hot_seconds}s on each"
    hot_key 'lease = "auto"' 'lease = "auto"'
    hot_key '' 'no lease'
}

if [ "${1:-}" = "hot" ]; then
    run_hot_keys
    exit 0
fi

# setup name | example binary | environment (a quota goes where QUOTA is)
setups=(
    "no layer|quickstart|RATE_LIMIT=off"
    "tollgate, memory store|quickstart|RATE_LIMIT=QUOTA"
    "tollgate, memory store, no headers|quickstart|RATE_LIMIT=QUOTA HEADERS=none"
    "tollgate, Redis store|quickstart|RATE_LIMIT=QUOTA REDIS_URL=$redis_url"
    "tower_governor|governor_server|RATE_LIMIT=QUOTA"
    "tower_governor, headers on|governor_server|RATE_LIMIT=QUOTA HEADERS=on"
)
traffics=("random keys|random|$random_quota" "one flooded key|flood|$flood_quota")

# One line per measured run: traffic, setup, round, requests/s, requests, non-2xx responses,
# Redis calls, EVALSHA calls, EVALSHA µs.
results="$work/results"
: >"$results"
for round in $(seq 1 "$rounds"); do
    for traffic in "${traffics[@]}"; do
        IFS='|' read -r traffic_name script quota <<<"$traffic"
        for setup in "${setups[@]}"; do
            IFS='|' read -r setup_name binary environment <<<"$setup"
            printf 'round %s/%s: %s, %s: ' "$round" "$rounds" "$traffic_name" "$setup_name" >&2
            # shellcheck disable=SC2086 # the environment is a list of words
            start_server "$binary" ${environment//QUOTA/$quota}
            run_wrk 1 "$script" "$server_port" >/dev/null # warm up (and use up the flooded quota)
            redis_stat config resetstat
            report=$(run_wrk "$seconds" "$script" "$server_port")
            read -r calls evalsha usec <<<"$(redis_counts)"
            stop_server
            rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$report")
            requests=$(awk '/ requests in / { print $1 }' <<<"$report")
            non_2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$report")
            errors=$(awk '/Socket errors:/ { print }' <<<"$report")
            [ -z "$errors" ] || echo "  wrk: $errors" >&2
            if [ -z "$rps" ] || [ -z "$requests" ]; then
                echo "wrk gave no result:" >&2
                echo "$report" >&2
                exit 1
            fi
            echo "$rps requests/s, $requests requests, ${non_2xx:-0} not 2xx" >&2
            printf '%s|%s|%s|%s|%s|%s|%s|%s|%s\n' "$traffic_name" "$setup_name" "$round" \
                "$rps" "$requests" "${non_2xx:-0}" "$calls" "$evalsha" "$usec" >>"$results"
        done
    done
done

echo
echo "$(nproc) cores: $(lscpu | awk -F': *' '/^Model name/ { print $2; exit }'); $(wrk -v 2>&1 | head -n 1 | awk '{ print $1, $2 }');" \
    "redis-server $(redis-server --version | grep -o 'v=[0-9.]*' | cut -c3-);" \
    "wrk -t$threads -c$connections -d${seconds}s, median of $rounds interleaved rounds"
echo
# Each run's share is taken against the no-layer run of the same round and traffic, then the
# median over rounds is reported (as is the median requests/s); the other columns come from
# the run with the median requests/s.
awk -F'|' -v rounds="$rounds" '
    function median(list,   n, values, i, j, t) {
        n = split(list, values, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (values[j] + 0 < values[i] + 0) { t = values[i]; values[i] = values[j]; values[j] = t }
        return values[int((n + 1) / 2)]
    }
    {
        row = $1 "|" $2
        if (!(row in seen)) { seen[row] = 1; order[++rows] = row }
        run[row, $3] = $0
        rps[row] = rps[row] " " $4
        if ($2 == "no layer") base[$1, $3] = $4
    }
    END {
        print "| traffic | setup | requests/s | share of no layer | non-2xx | Redis calls per request | Redis µs per EVALSHA |"
        print "|---|---|---|---|---|---|---|"
        for (r = 1; r <= rows; r++) {
            row = order[r]
            split(row, name, "|")
            m = median(rps[row])
            shares = ""
            for (i = 1; i <= rounds; i++) {
                split(run[row, i], f, "|")
                shares = shares " " f[4] / base[name[1], i]
                if (f[4] == m) chosen = run[row, i]
            }
            split(chosen, f, "|")
            calls = ""; usec = ""
            if (name[2] ~ /Redis/) {
                calls = sprintf("%.4f", f[7] / f[5])
                usec = f[8] > 0 ? sprintf("%.2f", f[9] / f[8]) : "-"
            }
            printf "| %s | %s | %.0f | %.2f | %.1f%% | %s | %s |\n", name[1], name[2], m,
                median(shares), 100 * f[6] / f[5], calls, usec
        }
    }' "$results"

run_hot_keys
