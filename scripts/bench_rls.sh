#!/usr/bin/env bash
# tollgate-rls against a bare tonic floor and, when given, limitador-server (Kuadrant's rate
# limit service), measured the way an operator measures them: every server its own process,
# the load generator (tollgate-rls/examples/rls_load.rs: one HTTP/2 connection, N requests in flight, closed
# loop, one runtime thread) another, all on this machine over 127.0.0.1. Prints one Markdown
# table (decisions/s, p50/p99 µs, ratios), then what each service costs Redis per decision.
#
#   scripts/bench_rls.sh
#   LIMITADOR=/path/to/limitador-server scripts/bench_rls.sh
#
# Rows: 1, 4 and 32 requests in flight; one descriptor value every time (`tenant=acme`) or
# 100,000 values in turn (`user=u0` …); the memory store and Redis (a private redis-server on a
# free port). Every server has the same single limit, far above what is sent (10^9 a day per
# value), so every answer is OK. The floor (tollgate-rls/examples/rls_floor.rs) answers OK without deciding,
# on one runtime thread.
#
# Within a row the servers are measured in turns, BENCH_ROUNDS times (default 3), each for
# BENCH_SECONDS (default 2) after half a second of warm-up, in the opposite order every other
# round; the table shows the median of the turns, so that whatever else the machine does
# weighs on all of them alike and one turn that met a burst of it does not move a cell (about
# 5 minutes with limitador). BENCH_THREADS="1 2" adds a
# tollgate-rls column per worker thread count (TOKIO_WORKER_THREADS) besides the default one;
# BENCH_OTHER=/path/to/tollgate-rls adds a column for another build (to compare two versions
# in one run). BENCH_IN_FLIGHT (default "1 4 32"), BENCH_VALUES (default "one 100k") and
# BENCH_STORES (default "memory redis") choose the rows. Binaries are taken from
# CARGO_TARGET_DIR (default target/); BENCH_NO_BUILD=1 skips the release build. Every process
# started here is stopped on exit. Turns with answers that were errors (say, a store timeout on
# a busy machine) are listed after the table instead of stopping the run.
# To build limitador-server: clone github.com/Kuadrant/limitador, then
# `cargo build --release -p limitador-server` (it needs protoc and libclang: Debian's
# protobuf-compiler and libclang-dev).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-2}
rounds=${BENCH_ROUNDS:-3}
limitador=${LIMITADOR:-}
extra_threads=${BENCH_THREADS:-}
other=${BENCH_OTHER:-}
in_flights=${BENCH_IN_FLIGHT:-1 4 32}
values_list=${BENCH_VALUES:-one 100k}
stores=${BENCH_STORES:-memory redis}
target=${CARGO_TARGET_DIR:-target}

if [ -z "${BENCH_NO_BUILD:-}" ]; then
    cargo build --release --quiet -p tollgate-rls
    cargo build --release --quiet -p tollgate-rls --example rls_load --example rls_floor
fi
load=$target/release/examples/rls_load
floor_bin=$target/release/examples/rls_floor
rls=$target/release/tollgate-rls

tmp=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
    for _ in $(seq 1 200); do
        (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listens on port $1" >&2
    exit 1
}

# The address on the first `grpc=ADDR` or `listening on ADDR` line of a server's stdout.
wait_address() {
    for _ in $(seq 1 200); do
        local line
        line=$(grep -m1 -o 'grpc=[^ ]*\|listening on [^ ]*' "$1" 2>/dev/null || true)
        if [ -n "$line" ]; then
            echo "${line##*[= ]}"
            return 0
        fi
        sleep 0.05
    done
    echo "no address in $1" >&2
    cat "$1" >&2
    exit 1
}

# The same limit for everyone: domain `hot` keyed by `tenant`, domain `distinct` by `user`.
mkdir -p "$tmp/runtime/rls/config"
cat >"$tmp/runtime/rls/config/hot.yaml" <<'EOF'
domain: hot
descriptors:
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: 1000000000 }
EOF
cat >"$tmp/runtime/rls/config/distinct.yaml" <<'EOF'
domain: distinct
descriptors:
  - key: user
    rate_limit: { unit: day, requests_per_unit: 1000000000 }
EOF
cat >"$tmp/limits.yaml" <<'EOF'
---
- namespace: hot
  max_value: 1000000000
  seconds: 86400
  conditions: []
  variables:
    - descriptors[0].tenant
- namespace: distinct
  max_value: 1000000000
  seconds: 86400
  conditions: []
  variables:
    - descriptors[0].user
EOF

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
pids+=($!)
wait_port "$redis_port"
redis() { redis-cli -p "$redis_port" "$@"; }

declare -A address
"$floor_bin" 127.0.0.1:0 >"$tmp/floor.out" &
pids+=($!)
address[floor]=$(wait_address "$tmp/floor.out")

# start_rls NAME BINARY THREADS [ENV…]: tollgate-rls on free ports (THREADS empty: its default).
start_rls() {
    local name=$1 binary=$2 threads=$3
    shift 3
    env RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=rls LOG_LEVEL=warn \
        GRPC_HOST=127.0.0.1 GRPC_PORT=0 HOST=127.0.0.1 PORT=0 DEBUG_HOST=127.0.0.1 DEBUG_PORT=0 \
        ${threads:+TOKIO_WORKER_THREADS=$threads} "$@" "$binary" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    pids+=($!)
    address[$name]=$(wait_address "$tmp/$name.out")
}

# start_limitador NAME STORAGE…
start_limitador() {
    local name=$1 rls_port http_port
    shift
    rls_port=$(free_port)
    http_port=$(free_port)
    "$limitador" --rls-ip 127.0.0.1 --rls-port "$rls_port" --http-ip 127.0.0.1 \
        --http-port "$http_port" "$tmp/limits.yaml" "$@" >"$tmp/$name.out" 2>&1 &
    pids+=($!)
    wait_port "$rls_port"
    address[$name]=127.0.0.1:$rls_port
}

# Columns: the floor, limitador (when given), tollgate-rls, tollgate-rls per BENCH_THREADS,
# and BENCH_OTHER's build.
columns=()
for store in $stores; do
    # The reference's default backend is Redis: the memory store is asked for by name.
    redis_env=(BACKEND_TYPE=memory)
    [ "$store" = redis ] && redis_env=(REDIS_URL="127.0.0.1:$redis_port" REDIS_SOCKET_TYPE=tcp)
    start_rls "tollgate-$store" "$rls" "" "${redis_env[@]}"
    for t in $extra_threads; do
        start_rls "tollgate-$store-$t" "$rls" "$t" "${redis_env[@]}"
    done
    [ -n "$other" ] && start_rls "other-$store" "$other" "" "${redis_env[@]}"
    if [ -n "$limitador" ]; then
        case $store in
            memory) start_limitador limitador-memory memory ;;
            redis) start_limitador limitador-redis redis "redis://127.0.0.1:$redis_port" ;;
        esac
    fi
done
[ -n "$limitador" ] && columns+=(limitador)
columns+=(tollgate)
for t in $extra_threads; do columns+=("tollgate-$t"); done
[ -n "$other" ] && columns+=(other)

# server COLUMN STORE: the server a column has for a store.
server() {
    case $1 in
        limitador) echo "limitador-$2" ;;
        tollgate) echo "tollgate-$2" ;;
        other) echo "other-$2" ;;
        *) echo "tollgate-$2-${1#tollgate-}" ;;
    esac
}

# measure SERVER IN_FLIGHT VALUES: appends "decisions/s p50 p99 answered" to $tmp/SERVER.IN.VALUES;
# answers that were errors (a store timeout on a busy machine, say) are noted, not fatal.
measure() {
    if ! "$load" "${address[$1]}" "$2" "$seconds" "$3" >>"$tmp/$1.$2.$3" 2>"$tmp/load.err"; then
        echo "- $1, $2 in flight, $3: $(cat "$tmp/load.err")" >>"$tmp/failures"
    fi
}

turns=(floor)
for store in $stores; do
    for column in "${columns[@]}"; do turns+=("$(server "$column" "$store")"); done
done
for in_flight in $in_flights; do
    for values in $values_list; do
        for round in $(seq 1 "$rounds"); do
            order=("${turns[@]}")
            if [ $((round % 2)) = 0 ]; then
                order=()
                for ((i = ${#turns[@]} - 1; i >= 0; i--)); do order+=("${turns[i]}"); done
            fi
            for name in "${order[@]}"; do measure "$name" "$in_flight" "$values"; done
        done
    done
done

# median FILE: "decisions/s p50 p99", each the median of the turns (the mean of the middle two
# for an even count): one turn that met a burst of other work does not move it.
median() {
    local column
    for column in 1 2 3; do
        sort -n -k"$column,$column" "$1" | awk -v c="$column" '{ v[NR] = $c }
            END { printf "%.0f ", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
    done
    echo
}
# cell "DECISIONS P50 P99": `12,345 (150/1,234)`, grouped by hand (the C locale groups nothing).
cell() {
    awk 'function g(n,  s, out) {
            s = sprintf("%d", n); out = ""
            while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
            return s out
        }
        { printf "%s (%s/%s)", g($1), g($2), g($3) }' <<<"$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

header="| in flight | values | store | floor, 1 thread |"
rule="|---|---|---|---|"
for column in "${columns[@]}"; do
    case $column in
        limitador) header+=" limitador |" ;;
        tollgate) header+=" tollgate-rls |" ;;
        other) header+=" BENCH_OTHER |" ;;
        *) header+=" tollgate-rls, ${column#tollgate-} worker(s) |" ;;
    esac
    rule+="---|"
done
[ -n "$limitador" ] && header+=" decisions/s, tollgate-rls / limitador | p99, tollgate-rls / limitador |" && rule+="---|---|"
header+=" tollgate-rls / floor |"
rule+="---|"
echo
echo "$header"
echo "$rule"
for in_flight in $in_flights; do
    for values in $values_list; do
        label=$([ "$values" = one ] && echo "one value" || echo "100k values")
        floor=$(median "$tmp/floor.$in_flight.$values")
        for store in $stores; do
            line="| $in_flight | $label | $store | $(cell "$floor") |"
            for column in "${columns[@]}"; do
                line+=" $(cell "$(median "$tmp/$(server "$column" "$store").$in_flight.$values")") |"
            done
            ours=$(median "$tmp/tollgate-$store.$in_flight.$values")
            if [ -n "$limitador" ]; then
                theirs=$(median "$tmp/limitador-$store.$in_flight.$values")
                line+=" $(ratio "${ours%% *}" "${theirs%% *}") | $(ratio "$(cut -d' ' -f3 <<<"$ours")" "$(cut -d' ' -f3 <<<"$theirs")") |"
            fi
            line+=" $(ratio "${ours%% *}" "${floor%% *}") |"
            echo "$line"
        done
    done
done

# What a decision costs Redis: 32 in flight, 100k values, counted by `INFO commandstats`.
redis_cost() {
    local name=$1 label=$2
    redis CONFIG RESETSTAT >/dev/null
    local out
    out=$("$load" "${address[$name]}" 32 "$seconds" 100k)
    local answered=${out##* }
    redis INFO commandstats | tr -d '\r' | awk -F'[:,=]' -v n="$answered" -v label="$label" '
        /^cmdstat_/ {
            name = substr($1, 9)
            if (name == "info" || name ~ /^config/) next
            calls += $3; usec += $5; list = list sprintf("%s%s %.2f", sep, name, $3 / n); sep = ", "
        }
        END { printf "| %s | %.2f | %.1f | %s |\n", label, calls / n, usec / n, list }'
}
if [ -s "$tmp/failures" ]; then
    echo
    echo "Turns with answers that were errors or not OK:"
    cat "$tmp/failures"
fi

case " $stores " in
    *" redis "*)
        echo
        echo "| service | Redis commands per decision | Redis server µs per decision | commands per decision |"
        echo "|---|---|---|---|"
        redis_cost tollgate-redis tollgate-rls
        [ -n "$limitador" ] && redis_cost limitador-redis limitador
        ;;
esac
exit 0
