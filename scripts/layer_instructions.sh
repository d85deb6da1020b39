#!/usr/bin/env bash
# Instructions per request through the layer, counted by valgrind's callgrind
# (benches/layer_instructions.rs): a figure a shared machine's load does not move, to compare
# two builds of the layer. Each mode runs at N=1,000 and N=11,000 requests; the difference of
# the two totals over 10,000 is one request's cost (start-up cancels out). The one-time setup
# of lazily made statics and reads of the clock are left out of both totals.
#
#   scripts/layer_instructions.sh              every mode: floor, ietf, legacy, none
#   scripts/layer_instructions.sh ietf none    those modes
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(floor ietf legacy none)

bin=$(cargo bench --bench layer_instructions --no-run --message-format=json 2>/dev/null |
    jq -r 'select(.reason == "compiler-artifact" and .target.name == "layer_instructions") | .executable' |
    tail -1)
[ -x "$bin" ] || { echo "the benchmark did not build: cargo bench --bench layer_instructions --no-run" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# A run's total, without the lines of one-time initialisation and clock reads.
total() {
    callgrind_annotate --threshold=100 --inclusive=no "$1" | awk '
        /PROGRAM TOTALS/ { gsub(",", "", $1); t = $1; next }
        /OnceCell<T>::initialize::\{\{closure\}\}|clock_gettime/ { v = $1; gsub(",", "", v); x += v }
        END { print t - x }'
}

echo "| mode | instructions per request |"
echo "|---|---|"
for mode in "${modes[@]}"; do
    for n in 1000 11000; do
        valgrind --tool=callgrind --callgrind-out-file="$out/$mode.$n" "$bin" "$mode" "$n" >/dev/null 2>&1
    done
    small=$(total "$out/$mode.1000")
    large=$(total "$out/$mode.11000")
    echo "| $mode | $(( (large - small) / 10000 )) |"
done
