#!/usr/bin/env bash
# Checks the layout of src/ that keeps the crate readable:
#
# - no non-test source file over 500 lines (tests live in `mod tests { .. }` at the end of a
#   file, or in test-only files: `tests.rs`, `*_tests.rs`, `test_*.rs`, or under a `tests/`
#   folder);
# - no import cycle between the top-level modules of src/ (`algorithm`, `key`, `layer`,
#   `limiter`, `quota`, `response`, `rules`, `service`, `store`, ...): a module's non-test
#   code names another as `crate::<module>`, so the request path reads top to bottom;
# - non-test code imports from the module that defines a name (`crate::error::ConfigError`),
#   not from the root's re-exports (`crate::ConfigError`), so that every dependency shows;
# - the crate root re-exports at most 16 names (`pub use` in src/lib.rs), each of which has
#   no other public home;
# - the limiter (src/limiter/) never mentions gRPC or tonic: it says what was decided, and
#   the service renders it for the request's protocol.
#
# Prints what is wrong and exits 1; prints nothing and exits 0 when all is well.
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_LINES=500
MAX_ROOT_NAMES=16
failed=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT

is_test_file() {
    case "$1" in
        */tests/*|*/tests.rs|*_tests.rs|*/test_*.rs) return 0 ;;
        *) return 1 ;;
    esac
}

# The file's code before its `#[cfg(test)] mod <name> {` block, if it has one.
non_test_code() {
    awk '
        { line[NR] = $0 }
        END {
            for (i = 1; i <= NR; i++) {
                if (line[i] == "#[cfg(test)]" && line[i + 1] ~ /^mod [a-z_]+ \{/) break
                print line[i]
            }
        }
    ' "$1"
}

while IFS= read -r file; do
    is_test_file "$file" && continue
    code=$(non_test_code "$file")
    lines=$(printf '%s\n' "$code" | wc -l)
    if [ "$lines" -gt "$MAX_LINES" ]; then
        echo "$file: $lines lines of non-test code (at most $MAX_LINES; split it, or move tests to a tests.rs)"
        failed=1
    fi
    [ "$file" = src/lib.rs ] && continue
    # The top-level module: src/<module>.rs or src/<module>/...
    module=${file#src/}
    module=${module%%/*}
    module=${module%.rs}
    # Code only: comments (doc links included) name modules without depending on them.
    uses=$(printf '%s\n' "$code" | grep -v '^[[:space:]]*//' || true)
    if printf '%s\n' "$uses" | grep -nE 'crate::(\{|[A-Z])' >/dev/null; then
        printf '%s\n' "$uses" | grep -nE 'crate::(\{|[A-Z])' | while IFS= read -r hit; do
            echo "$file:${hit%%:*}: import from the defining module, not the crate root: ${hit#*:}"
        done
        failed=1
    fi
    { printf '%s\n' "$uses" | grep -oE 'crate::[a-z_]+' || true; } | sed 's/^crate:://' |
        sort -u | while IFS= read -r dependency; do
            if [ "$dependency" != "$module" ]; then echo "$module $dependency"; fi
        done >>"$edges"
done < <(find src -name '*.rs' | sort)

# The names `pub use`d at the crate root: `pub use a::B;` or `pub use a::{B, C};`.
root_names=$(sed -n 's/^pub use [a-z_:]*::\({\?\)\(.*\);$/\2/p' src/lib.rs | tr -d '{}' | tr ',' '\n' |
    sed 's/.* as //; s/^ *//; s/ *$//' | grep -v '^$' || true)
count=$(printf '%s\n' "$root_names" | grep -c . || true)
if [ "$count" -gt "$MAX_ROOT_NAMES" ]; then
    echo "src/lib.rs: $count names at the crate root (at most $MAX_ROOT_NAMES): $(echo $root_names)"
    failed=1
fi
# A root name also re-exported by a public module (`pub mod` in src/lib.rs) has two homes.
public_modules=$(sed -n 's/^pub mod \([a-z_]*\);$/\1/p' src/lib.rs)
for name in $root_names; do
    for module in $public_modules; do
        homes=$(grep -rlE "^pub (use .*|(trait|struct|enum|type|fn) )\b$name\b" "src/$module" \
            "src/$module.rs" 2>/dev/null || true)
        if [ -n "$homes" ]; then
            echo "$name is public both at the crate root and in tollgate::$module ($(echo $homes))"
            failed=1
        fi
    done
done

if grep -rniE 'grpc|tonic' src/limiter >/dev/null; then
    grep -rniE 'grpc|tonic' src/limiter | sed 's/^/the limiter mentions the protocol: /'
    failed=1
fi

if ! loops=$(tsort "$edges" 2>&1 >/dev/null) || [ -n "$loops" ]; then
    echo "import cycles between the top-level modules of src/ (each loop is listed by tsort):"
    printf '%s\n' "$loops" | sed -e "s#^tsort: $edges: input contains a loop:#  a loop through:#" \
        -e 's/^tsort: /    /'
    failed=1
fi

exit "$failed"
