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

# memcached for the memcached store's tests (Debian's memcached package).
if ! command -v memcached >/dev/null 2>&1; then
    echo "memcached not found: installing Debian's memcached package"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --reinstall memcached >/dev/null
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
# Stops both servers, waiting (5 s at most each) until they are gone: redis-server writes its
# last log lines into the directory on its way out, and a removal racing them fails.
cleanup() {
    local name pid
    for name in redis memcached; do
        [ -f "$redis_dir/$name.pid" ] || continue
        pid=$(cat "$redis_dir/$name.pid")
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
    rm -rf "$redis_dir" || true
}
trap cleanup EXIT
for _ in $(seq 1 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
done
export TOLLGATE_REDIS_URL="redis://127.0.0.1:$port"
echo "redis-server $(redis-server --version | grep -o 'v=[0-9.]*') on $TOLLGATE_REDIS_URL"

# A private memcached on another free port (-u: as root, memcached wants a user to run as).
memcached_port=""
for _ in $(seq 1 50); do
    candidate=$((20000 + RANDOM % 40000))
    if [ "$candidate" != "$port" ] && ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
        memcached_port=$candidate
        break
    fi
done
[ -n "$memcached_port" ] || { echo "no free port found for memcached" >&2; exit 1; }
memcached -p "$memcached_port" -U 0 -l 127.0.0.1 -u nobody >/dev/null 2>&1 &
echo $! >"$redis_dir/memcached.pid"
for _ in $(seq 1 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$memcached_port") 2>/dev/null && break
    sleep 0.1
done
export TOLLGATE_MEMCACHED_URL="memcache://127.0.0.1:$memcached_port"
echo "$(memcached -V) on $TOLLGATE_MEMCACHED_URL"

cargo fmt --all -- --check
# The layout of every crate (no import circle, no non-test file over 500 lines, one public
# path per item, no `#[path]`), and the check itself on a tree with faults planted.
bash scripts/check_layout.sh
bash scripts/check_layout.sh --self-test
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo check --no-default-features
cargo check --no-default-features --features axum
cargo check --no-default-features --features tonic
cargo check --no-default-features --features cluster
cargo check --no-default-features --features sentinel
cargo check --no-default-features --features tls
cargo check --no-default-features --features memcached
# Envoy's service is its own crate: the library never builds Envoy's protos.
if cargo tree -p tollgate --all-features --prefix none | grep -E '^envoy-types '; then
    echo "cargo tree -p tollgate --all-features lists envoy-types (above): it belongs to tollgate-rls" >&2
    exit 1
fi
# Without default features, neither axum nor tonic is compiled in.
if cargo tree --no-default-features -e normal --prefix none | grep -E '^(axum|tonic)[- ]'; then
    echo "cargo tree --no-default-features lists axum or tonic (above)" >&2
    exit 1
fi

# jq reads `cargo metadata` below.
if ! command -v jq >/dev/null 2>&1; then
    echo "jq not found: installing Debian's jq package"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq jq >/dev/null
fi

# rust-version is declared, and is no older than that of any crate a build of this one compiles
# (normal and build dependencies of every feature, transitively). Older toolchains cannot be
# installed everywhere this runs, so this is the check that can.
# shellcheck disable=SC2016
rust_version_jq='
def vkey: split(".") | map(tonumber) | (. + [0, 0, 0])[0:3];
(.packages | map({key: .id, value: .}) | from_entries) as $pkgs
| (.resolve.nodes
   | map({key: .id,
          value: [.deps[] | select(any(.dep_kinds[]; .kind == null or .kind == "build")) | .pkg]})
   | from_entries) as $deps
| .workspace_members[] as $member
| ({seen: {}, todo: $deps[$member]}
   | until(.todo | length == 0;
       .todo[0] as $id | .todo |= .[1:]
       | if .seen[$id] then . else .seen[$id] = true | .todo += $deps[$id] end)
   | .seen | keys) as $closure
| ([$closure[] | $pkgs[.] | select(.rust_version != null)] | max_by(.rust_version | vkey)) as $top
| [$pkgs[$member].name, ($pkgs[$member].rust_version // "none"), ($top.name // "-"),
   ($top.rust_version // "0")]
| @tsv'
cargo metadata --format-version 1 --all-features --locked | jq -r "$rust_version_jq" |
    while IFS=$'\t' read -r member declared dep needed; do
        if [ "$declared" = none ]; then
            echo "$member: Cargo.toml declares no rust-version (its dependencies need $needed, $dep)" >&2
            exit 1
        fi
        # As three numbers each (1.89 is 1.89.0), so that sort -V compares like with like.
        padded() { echo "$1.0.0" | cut -d. -f1-3; }
        if [ "$(printf '%s\n%s\n' "$(padded "$needed")" "$(padded "$declared")" | sort -V | tail -n 1)" != "$(padded "$declared")" ]; then
            echo "$member: rust-version $declared is older than $dep's $needed: raise it in Cargo.toml" >&2
            exit 1
        fi
        echo "$member: rust-version $declared (the highest among its dependencies: $dep $needed)"
    done

# Every feature-gated public item carries a docs.rs badge: an item under
# `#[cfg(feature = "…")]` also has `#[cfg_attr(docsrs, doc(cfg(feature = "…")))]`.
# shellcheck disable=SC2016
doc_cfg_awk='
FNR == 1 { attrs = "" }
/^[[:space:]]*(#\[|\/\/\/)/ { attrs = attrs "\n" $0; next }
{
    if (attrs ~ /#\[cfg\(feature/ && attrs !~ /doc\(cfg\(/ && $0 ~ /^[[:space:]]*(pub [a-z]|impl[ <])/) {
        print FILENAME ":" FNR ": feature-gated without #[cfg_attr(docsrs, doc(cfg(...)))]: " $0
        missing = 1
    }
    attrs = ""
}
END { exit missing }'
find src -name '*.rs' -print0 | xargs -0 awk "$doc_cfg_awk" >&2

# The docs build without warnings (broken intra-doc links fail), as users' `cargo doc` builds
# them and as docs.rs does (nightly, `--cfg docsrs`: the feature badges; stable's rustdoc is
# let through the nightly attribute for this one build).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features --quiet
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p tollgate-rls --lib --quiet
RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="--cfg docsrs -D warnings" cargo doc --no-deps --all-features --quiet

# The library and tollgate-rls (whose tests run the built binary).
cargo test --workspace --all-features

# The published package holds what it needs to build (the include list in Cargo.toml) and stays
# far below crates.io's 10 MB limit. `cargo package` verifies by building the package with its
# default features, which shares no compiled dependency with the builds above (a minute or two
# on a fresh clone); checking the unpacked package with every feature reuses the doc builds'
# dependencies and catches the same missing files, in about 30 s. In a checkout with uncommitted
# changes (not CI's clean clone) cargo needs --allow-dirty to package the files as they are.
package_flags=(--no-verify)
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
    echo "uncommitted changes: cargo package --allow-dirty"
    package_flags+=(--allow-dirty)
fi
cargo package --quiet "${package_flags[@]}" 2>&1 | { grep -v '^warning: ignoring test' || true; }
package_meta=$(cargo metadata --format-version 1 --no-deps)
package_name=$(jq -r '.packages[] | select(.name == "tollgate") | "\(.name)-\(.version)"' <<<"$package_meta")
package_dir="$(jq -r .target_directory <<<"$package_meta")/package"
crate_bytes=$(stat -c %s "$package_dir/$package_name.crate")
if [ "$crate_bytes" -ge 1048576 ]; then
    echo "$package_dir/$package_name.crate is $crate_bytes bytes: the package must stay under 1 MB (see include in Cargo.toml)" >&2
    exit 1
fi
rm -rf "${package_dir:?}/$package_name"
# --touch: the crate stores one fixed mtime, which cargo would take for an up-to-date build.
tar --touch -xzf "$package_dir/$package_name.crate" -C "$package_dir"
cargo check --quiet --all-features --manifest-path "$package_dir/$package_name/Cargo.toml"
echo "cargo package: $package_name.crate, $crate_bytes bytes, checks with every feature"
