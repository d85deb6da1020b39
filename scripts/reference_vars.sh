#!/usr/bin/env bash
# Lists every variable of the reference's settings (envoyproxy/ratelimit, src/settings/settings.go)
# and finds each one read by tollgate-rls's settings or logged by them as ignored
# (tollgate-rls/src/settings/, as a string literal outside the tests). Exits 1 naming any that is
# neither: a variable silently dropped.
#
#   scripts/reference_vars.sh                  the list kept in tollgate-rls/tests/rls/reference/
#   scripts/reference_vars.sh PATH/settings.go that file's variables, compared with the list kept
#                                              (a newer reference: update the list with --write)
#   scripts/reference_vars.sh --write PATH/settings.go   rewrites the list kept from that file
set -euo pipefail
cd "$(dirname "$0")/.."

kept=tollgate-rls/tests/rls/reference/settings_vars.txt
pending=tollgate-rls/tests/rls/reference/settings_vars_pending.txt
settings=tollgate-rls/src/settings

# NAME=DEFAULT for every `envconfig:"NAME" default:"DEFAULT"` field, in the file's order.
extract() {
    grep -o 'envconfig:"[A-Z0-9_]*"\( *default:"[^"]*"\)\?' "$1" |
        sed -E 's/envconfig:"([A-Z0-9_]*)"( *default:"([^"]*)")?/\1=\3/'
}

if [ "${1:-}" = "--write" ]; then
    { echo "# envoyproxy/ratelimit src/settings/settings.go: NAME=DEFAULT (scripts/reference_vars.sh --write)"
      extract "$2"; } >"$kept"
    exit 0
fi
if [ $# -eq 1 ]; then
    if ! diff <(extract "$1") <(grep -v '^#' "$kept") >/dev/null; then
        echo "$1 differs from $kept:" >&2
        diff <(extract "$1") <(grep -v '^#' "$kept") >&2 || true
        exit 1
    fi
fi

# The settings' code, without the unit tests at the end of each file.
code() {
    for f in "$settings"/*.rs; do
        awk '/^#\[cfg\(test\)\]/ { exit } { print FILENAME ": " $0 }' "$f"
    done
}
all_code=$(code)
total=0 read=0 ignored=0 waiting=0
missing=()
while IFS='=' read -r name _; do
    [ -z "$name" ] && continue
    case "$name" in \#*) continue ;; esac
    total=$((total + 1))
    found=$(grep -F "\"$name\"" <<<"$all_code" || true)
    if [ -z "$found" ]; then
        if grep -qx "$name" <(grep -v '^#' "$pending"); then
            waiting=$((waiting + 1))
            echo "pending  $name"
        else
            missing+=("$name")
        fi
    elif grep -qv "^$settings/ignored.rs: " <<<"$found"; then
        read=$((read + 1))
        echo "read     $name"
    else
        ignored=$((ignored + 1))
        echo "ignored  $name"
    fi
done <"$kept"
echo "$total variables in the reference's settings.go: $read read, $ignored logged as ignored, $waiting pending, ${#missing[@]} neither"
if [ ${#missing[@]} -gt 0 ]; then
    echo "neither read nor logged as ignored: ${missing[*]}" >&2
    exit 1
fi
