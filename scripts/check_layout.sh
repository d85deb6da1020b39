#!/usr/bin/env bash
# Checks the layout of src/ that keeps the crate readable:
#
# - no non-test source file over 500 lines (tests live in `mod tests { .. }` at the end of a
#   file, or in test-only files, which are named `tests.rs` or sit under a `tests/` folder, and
#   nowhere else: a module declared `#[cfg(test)]` is one of those);
# - no `#[path = ..]` module in the workspace but an example's file, which an integration test
#   may include to run the example's own code: shared test helpers are the `tollgate-test-kit`
#   crate;
# - no import circle at any level of src/: between the top-level modules (`algorithm`,
#   `key`, `layer`, `limiter`, ..., `store`), and between the files and folders of every
#   folder (`store/contract.rs`, `store/memory/`, `store/wrappers/`, ...), so that every part
#   reads top to bottom. A file's non-test code that names `crate::a::b::..`, `super::..` or
#   `self::..` depends on the module it names; a folder's `mod.rs` (its front door, which
#   declares and re-exports its children) is not counted as depending on its own children,
#   nor a file on its own ancestors;
# - the stores and the contract stay under the store wrappers: nothing in `store/` outside
#   `store/wrappers/` (and the front door `store/mod.rs`, and the store tests under
#   `store/tests/`) imports from `store/wrappers/`, tests included: `memory/`, `redis/`, the
#   contract files, and any store added beside them;
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
    # Code only: comments (doc links included) name modules without depending on them.
    uses=$(printf '%s\n' "$code" | grep -v '^[[:space:]]*//' || true)
    if printf '%s\n' "$uses" | grep -nE 'crate::(\{|[A-Z])' >/dev/null; then
        printf '%s\n' "$uses" | grep -nE 'crate::(\{|[A-Z])' | while IFS= read -r hit; do
            echo "$file:${hit%%:*}: import from the defining module, not the crate root: ${hit#*:}"
        done
        failed=1
    fi
done < <(find src -name '*.rs' | sort)

# The import graph of src/, at every level: each circle, and each import of the store wrappers
# by memory/ or redis/.
if ! perl - <<'PERL'
use strict;
use warnings;

my @files = sort split /\n/, `find src -name '*.rs'`;

sub is_test_file { $_[0] =~ m{/tests/|/tests\.rs$} }

# The module path of a file: src/a/b.rs and src/a/b/mod.rs are (a, b); src/lib.rs is ().
sub module_of {
    my ($file) = @_;
    (my $path = $file) =~ s{^src/}{};
    $path =~ s{\.rs$}{};
    $path =~ s{(^|/)(mod|lib)$}{};
    return $path eq '' ? () : split m{/}, $path;
}

sub is_module {
    my $path = join '/', @_;
    return -f "src/$path.rs" || -f "src/$path/mod.rs";
}

# The file's code, without comments; before its `#[cfg(test)] mod <name> {` block unless
# `$whole`, and without the item after a `#[cfg(test)]` line.
sub code_of {
    my ($file, $whole) = @_;
    open my $fh, '<', $file or die "$file: $!";
    my @lines = <$fh>;
    close $fh;
    my @code;
    for (my $i = 0; $i < @lines; $i++) {
        my $line = $lines[$i];
        if ($line =~ /^\s*#\[cfg\(test\)\]\s*$/) {
            last if !$whole && defined $lines[$i + 1] && $lines[$i + 1] =~ /^(pub(\([a-z]+\))? )?mod [a-z_]+ \{/;
            $i++ unless $whole;    # a test-only item (a `use`, a `mod`) on the next line
            next;
        }
        $line =~ s{//.*$}{};
        push @code, $line;
    }
    return join '', @code;
}

# Every path a piece of code names from `crate::`, `super::` or `self::`, `use` trees
# expanded: "crate::a::b::C", "super::x".
sub paths_in {
    my ($code) = @_;
    my @paths;
    while ($code =~ /\buse\s+((?:crate|super|self)\b[^;]*);/g) {
        push @paths, expand($1);
    }
    (my $rest = $code) =~ s/\buse\s+[^;]*;//g;
    while ($rest =~ /\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)/g) {
        push @paths, $1;
    }
    return @paths;
}

# Expands a `use` tree ("a::{b, c::{d, e}}") into its paths.
sub expand {
    my ($tree) = @_;
    $tree =~ s/\s+//g;
    $tree =~ s/\bas\w+//g;
    return ($tree) unless $tree =~ /^(.*?)::\{(.*)\}$/;
    my ($prefix, $inner) = ($1, $2);
    my @parts;
    my ($depth, $part) = (0, '');
    for my $ch (split //, $inner) {
        $depth++ if $ch eq '{';
        $depth-- if $ch eq '}';
        if ($ch eq ',' && $depth == 0) { push @parts, $part; $part = ''; next }
        $part .= $ch;
    }
    push @parts, $part if $part ne '';
    return map { $_ eq 'self' ? $prefix : expand("${prefix}::$_") } @parts;
}

# The module a path names from the file of module @from: its longest prefix that is a module.
sub target_of {
    my ($path, @from) = @_;
    my @segments = split /::/, $path;
    my $base = shift @segments;
    my @module;
    if ($base eq 'crate') {
        @module = ();
    } else {
        # `self` is the file's own module; `super` its parent (for src/a/b.rs, `a`).
        @module = @from;
        if ($base eq 'super') {
            pop @module;
            while (@segments && $segments[0] eq 'super') { shift @segments; pop @module; }
        }
    }
    for my $segment (@segments) {
        last unless is_module(@module, $segment);
        push @module, $segment;
    }
    return @module;
}

my (%edges, @wrong);
for my $file (@files) {
    next if $file eq 'src/lib.rs';
    my @from = module_of($file);
    # Under the wrappers: everything in store/ but the wrappers, the front door and the tests.
    my $in_backend = $file =~ m{^src/store/} && $file !~ m{^src/store/(wrappers/|tests/|mod\.rs$)};
    next if is_test_file($file) && !$in_backend;
    my $code = code_of($file, is_test_file($file));
    for my $path (paths_in($code)) {
        my @to = target_of($path, @from);
        if ($in_backend && @to >= 2 && $to[0] eq "store" && $to[1] eq "wrappers") {
            push @wrong, "$file: imports the store wrappers ($path): the stores and the contract are below them";
        }
        next if is_test_file($file);
        my $k = 0;
        $k++ while $k < @from && $k < @to && $from[$k] eq $to[$k];
        # Its own module or an ancestor (a folder's front door), or a descendant (a
        # folder's mod.rs over its own children): no edge.
        next if $k == @to || $k == @from;
        my $level = join('/', 'src', @from[0 .. $k - 1]);
        $edges{$level}{$from[$k]}{$to[$k]}{$file} = 1;
    }
}

print "$_\n" for @wrong;

# Circles: the strongly connected parts of each level's graph (Tarjan).
my $circles = 0;
for my $level (sort keys %edges) {
    my $graph = $edges{$level};
    my (%index, %low, %on, @stack, $next);
    $next = 0;
    my $visit;
    $visit = sub {
        my ($v) = @_;
        $index{$v} = $low{$v} = $next++;
        push @stack, $v;
        $on{$v} = 1;
        for my $w (sort keys %{ $graph->{$v} || {} }) {
            if (!exists $index{$w}) {
                $visit->($w);
                $low{$v} = $low{$w} if $low{$w} < $low{$v};
            } elsif ($on{$w}) {
                $low{$v} = $index{$w} if $index{$w} < $low{$v};
            }
        }
        if ($low{$v} == $index{$v}) {
            my @part;
            while (1) {
                my $w = pop @stack;
                $on{$w} = 0;
                push @part, $w;
                last if $w eq $v;
            }
            if (@part > 1) {
                my %in = map { $_ => 1 } @part;
                print "import circle in $level/ between: ", join(', ', sort @part), "\n";
                for my $a (sort @part) {
                    for my $b (sort keys %{ $graph->{$a} }) {
                        next unless $in{$b};
                        print "    $a -> $b (", join(', ', sort keys %{ $graph->{$a}{$b} }), ")\n";
                    }
                }
                $circles++;
            }
        }
    };
    $visit->($_) for grep { !exists $index{$_} } sort keys %$graph;
}
exit((@wrong || $circles) ? 1 : 0);
PERL
then
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

if hits=$(grep -rn --include='*.rs' '#\[path' src tests examples benches test-kit tollgate-rls/src \
    tollgate-rls/tests | grep -v '#\[path = "\(\.\./\)*examples/[a-z_]*\.rs"\]'); then
    printf '%s\n' "$hits" | sed 's/$/: a module included by path (use the test kit or a module of its own)/'
    failed=1
fi

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

exit "$failed"
