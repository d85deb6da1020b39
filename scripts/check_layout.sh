#!/usr/bin/env bash
# Checks the layout of src/ that keeps the crate readable:
#
# - no non-test source file over 500 lines (tests live in `mod tests { .. }` at the end of a
#   file, or in test-only files, which are named `tests.rs` or sit under a `tests/` folder, and
#   nowhere else: a module declared `#[cfg(test)]` is one of those);
# - no `#[path = ..]` module anywhere in the workspace: shared test helpers are the
#   `tollgate-test-kit` crate, an example's tests live in the example;
# - no import cycle between the top-level modules of src/ (`algorithm`, `key`, `layer`,
#   `limiter`, `quota`, `response`, `rules`, `service`, `store`, ...): a module's non-test
#   code names another as `crate::<module>`, so the request path reads top to bottom;
# - non-test code imports from the module that defines a name (`crate::error::ConfigError`),
#   not from the root's re-exports (`crate::ConfigError`), so that every dependency shows.
#
# Prints what is wrong and exits 1; prints nothing and exits 0 when all is well.
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_LINES=500
failed=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT

is_test_file() {
    case "$1" in
        */tests/*|*/tests.rs) return 0 ;;
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

if ! loops=$(tsort "$edges" 2>&1 >/dev/null) || [ -n "$loops" ]; then
    echo "import cycles between the top-level modules of src/ (each loop is listed by tsort):"
    printf '%s\n' "$loops" | sed -e "s#^tsort: $edges: input contains a loop:#  a loop through:#" \
        -e 's/^tsort: /    /'
    failed=1
fi

# Test-only modules under a name that says so: `#[cfg(test)] mod x;` only as `tests`, or in a
# file under a `tests/` folder.
while IFS= read -r file; do
    is_test_file "$file" && continue
    awk -v file="$file" '
        prev == "#[cfg(test)]" && $0 ~ /^ *(pub(\([a-z:]+\))? )?mod [a-z_]+;/ && $0 !~ /mod tests;/ {
            print file ":" NR ": a test-only module not named `tests`: " $0
            bad = 1
        }
        { prev = $0 }
        END { exit bad }
    ' "$file" || failed=1
done < <(find src -name '*.rs' | sort)

if hits=$(grep -rn --include='*.rs' '#\[path' src tests examples benches test-kit tollgate-rls/src tollgate-rls/tests); then
    printf '%s\n' "$hits" | sed 's/$/: a module included by path (use the test kit or a module of its own)/'
    failed=1
fi

exit "$failed"
