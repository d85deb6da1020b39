#!/usr/bin/env bash
# Checks scripts/check_layout.sh (`bash scripts/check_layout.sh --self-test` runs this): on
# copies of the tree as it is (without target/), the checker must pass the tree untouched and
# name every fault planted in it: a `#[path]` in each crate (sources, tests, examples, benches),
# a 501-line file in tollgate-rls and in test-kit (but not a 500-line one), an import circle and
# a second public path in test-kit, and a 501-line file in a member added to the workspace.
#
# Prints one line per case and exits 1 if any case went wrong.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar --exclude=./target --exclude=./.git -cf - . | tar -xf - -C "$work" --one-top-level=tree
failed=0

# A file of `$1` lines of code (no test, no comment).
lines_of_code() {
    for i in $(seq 1 "$1"); do echo "pub(crate) const LINE_$i: u32 = $i;"; done
}

# A copy of the tree for case `$1`, on which `plant_$1` plants its faults.
copy() {
    rm -rf "$work/case"
    cp -a "$work/tree" "$work/case"
}

# Runs the checker on the copy: its output in $work/out, its status in $status.
run_checker() {
    status=0
    bash "$work/case/scripts/check_layout.sh" >"$work/out" 2>&1 || status=$?
}

report() {
    if [ "$2" = ok ]; then
        echo "check_layout self-test: $1: ok"
    else
        echo "check_layout self-test: $1: FAILED: $2"
        sed 's/^/    /' "$work/out"
        failed=1
    fi
}

# Case: the tree as it is passes.
copy
run_checker
if [ "$status" -eq 0 ] && [ ! -s "$work/out" ]; then
    report "the tree as it is passes" ok
else
    report "the tree as it is passes" "exit $status, or findings (fix them first)"
fi

# Case: `expect <name> <pattern>...` after planting: the checker fails and names each pattern.
expect() {
    local name=$1
    shift
    run_checker
    if [ "$status" -ne 1 ]; then
        report "$name" "exit $status, not 1"
        return
    fi
    for pattern in "$@"; do
        if ! grep -qF -- "$pattern" "$work/out"; then
            report "$name" "no finding names '$pattern'"
            return
        fi
    done
    report "$name" ok
}

copy
path_files=(tollgate-rls/src/health.rs tollgate-rls/tests/binary.rs test-kit/src/log.rs
    src/key/mod.rs tests/integration/main.rs examples/quickstart.rs benches/decision.rs)
for file in "${path_files[@]}"; do
    printf '\n#[path = "planted.rs"]\nmod planted;\n' >>"$work/case/$file"
done
printf '\n#[cfg_attr(test, path = "planted.rs")]\nmod planted_too;\n' >>"$work/case/test-kit/src/dns.rs"
expect "a #[path] anywhere in the workspace fails" "${path_files[@]/%/:}" "test-kit/src/dns.rs:"

copy
lines_of_code 501 >"$work/case/tollgate-rls/src/planted.rs"
lines_of_code 501 >"$work/case/test-kit/src/planted.rs"
expect "a 501-line file in tollgate-rls and in test-kit fails" \
    "tollgate-rls/src/planted.rs: 501 lines" "test-kit/src/planted.rs: 501 lines"

copy
lines_of_code 500 >"$work/case/test-kit/src/planted.rs"
run_checker
if grep -qF "test-kit/src/planted.rs" "$work/out"; then
    report "a 500-line file passes" "it was reported"
else
    report "a 500-line file passes" ok
fi

copy
printf 'use crate::planted_b::B;\npub(crate) struct A;\n' >"$work/case/test-kit/src/planted_a.rs"
printf 'use crate::planted_a::A;\npub(crate) struct B;\n' >"$work/case/test-kit/src/planted_b.rs"
printf 'mod planted_a;\nmod planted_b;\n' >>"$work/case/test-kit/src/lib.rs"
expect "an import circle in test-kit fails" "import circle in test-kit/src/ between: planted_a, planted_b"

copy
sed -i 's/^mod ports;$/pub mod ports;/' "$work/case/test-kit/src/lib.rs"
expect "a second public path in test-kit fails" \
    "gives free_port a second public path (crate::ports::free_port is public too)"

copy
mkdir -p "$work/case/planted-member/src"
printf '[package]\nname = "planted-member"\nversion = "0.0.0"\nedition = "2021"\n' \
    >"$work/case/planted-member/Cargo.toml"
lines_of_code 501 >"$work/case/planted-member/src/lib.rs"
sed -i 's/^members = \[/members = ["planted-member", /' "$work/case/Cargo.toml"
expect "a 501-line file in a member added later fails" "planted-member/src/lib.rs: 501 lines"

exit "$failed"
