#!/usr/bin/env bash
# Runs every check: formatting, clippy, unit, integration and doc tests, against a private
# redis-server started for this run (installed from Debian's packages when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

# redis-server, and redis-cli (Debian's redis-tools, a dependency of redis-server) for the
# cluster tests' `redis-cli --cluster create`.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    echo "redis-server or redis-cli not found: installing Debian's redis-server package"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    # --reinstall also restores a binary that went missing from an installed package.
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --reinstall redis-server redis-tools >/dev/null
fi

# openssl makes the TLS test's certificate.
if ! command -v openssl >/dev/null 2>&1; then
    echo "openssl not found: installing Debian's openssl package"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq openssl >/dev/null
fi

# grpcio for tollgate-rls's Python client test (a second gRPC implementation against the binary).
if ! python3 -c 'import grpc' >/dev/null 2>&1; then
    echo "python grpcio not found: installing it with pip"
    python3 -m pip install --quiet grpcio 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages grpcio
fi

# A free port: one nothing answers on.
port=""
for _ in $(seq 1 50); do
    candidate=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
        port=$candidate
        break
    fi
done
[ -n "$port" ] || { echo "no free port found for redis-server" >&2; exit 1; }

redis_dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$redis_dir" --daemonize yes --pidfile "$redis_dir/redis.pid" \
    --logfile "$redis_dir/redis.log"
cleanup() {
    if [ -f "$redis_dir/redis.pid" ]; then kill "$(cat "$redis_dir/redis.pid")" 2>/dev/null || true; fi
    rm -rf "$redis_dir"
}
trap cleanup EXIT
for _ in $(seq 1 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
done
export TOLLGATE_REDIS_URL="redis://127.0.0.1:$port"
echo "redis-server $(redis-server --version | grep -o 'v=[0-9.]*') on $TOLLGATE_REDIS_URL"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo check --no-default-features
cargo check --no-default-features --features axum
cargo check --no-default-features --features tonic
cargo check --no-default-features --features cluster
cargo check --no-default-features --features sentinel
cargo check --no-default-features --features tls
cargo check --no-default-features --features rls
# Without default features, neither axum nor tonic is compiled in.
if cargo tree --no-default-features -e normal --prefix none | grep -E '^(axum|tonic)[- ]'; then
    echo "cargo tree --no-default-features lists axum or tonic (above)" >&2
    exit 1
fi
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features --quiet
# The library and tollgate-rls (whose tests run the built binary).
cargo test --workspace --all-features
