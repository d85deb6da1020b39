#!/usr/bin/env bash
# Checks the layout that keeps the workspace readable. Every crate of the workspace (its members,
# read from `cargo metadata`: today tollgate's src/, tollgate-rls/src/ and test-kit/src/, and any
# member added later) gets the same checks:
#
# - no non-test source file over 500 lines (tests live in `mod tests { .. }` at the end of a
#   file, or in test-only files, which are named `tests.rs` or sit under a `tests/` folder, and
#   nowhere else: a module declared `#[cfg(test)]` is one of those);
# - no import circle at any level of the crate: between the modules under the crate root
#   (`algorithm`, `key`, `layer`, ..., `store` in tollgate), and between the files and folders
#   of every folder (`store/contract.rs`, `store/memory/`, `store/wrappers/`, ...), so that
#   every part reads top to bottom. A file's non-test code that names `crate::a::b::..`,
#   `super::..` or `self::..` depends on the module it names; a folder's `mod.rs` or a
#   module's own file (its front door, which declares and re-exports its children) is not
#   counted as depending on its own children, nor a file on its own ancestors;
# - non-test code imports from the module that defines a name (`crate::error::ConfigError`),
#   not from the root's re-exports (`crate::ConfigError`), so that every dependency shows;
# - a module declared `#[cfg(test)]` is named `tests`;
# - in a library, every public item has one public path: no `pub use` of an item whose own
#   module is public too (a module is public when every module on its way down is `pub mod`),
#   and no item `pub use`d into two public modules.
#
# Nowhere in the workspace (sources, tests, examples, benches) is a module included by
# `#[path = ..]`: shared test helpers are the `tollgate-test-kit` crate, and an example is tested
# in its own `mod tests` (`test = true` in Cargo.toml).
#
# tollgate's own rules:
# - the stores and the contract stay under the store wrappers: nothing in `store/` outside
#   `store/wrappers/` (and the front door `store/mod.rs`, and the store tests under
#   `store/tests/`) imports from `store/wrappers/`, tests included: `memory/`, `redis/`, the
#   contract files, and any store added beside them;
# - the crate root re-exports at most 16 names (`pub use` in src/lib.rs), each of which has
#   no other public home;
# - the limiter (src/limiter/) never mentions gRPC or tonic: it says what was decided, and
#   the service renders it for the request's protocol.
#
# Prints what is wrong and exits 1; prints nothing and exits 0 when all is well.
#
# `--self-test` checks the checker: on copies of the tree, it must pass the tree as it is, and
# fail on a `#[path]` or a 501-line file planted in tollgate-rls and in test-kit, on a circle
# or a second public path planted in test-kit, and on a 501-line file in a member added to the
# workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_LINES=500
MAX_ROOT_NAMES=16

if [ "${1:-}" = --self-test ]; then
    exec bash scripts/check_layout_self_test.sh
fi

failed=0

# The folder of every crate root of the workspace: of each member's library and binaries
# (`src` for src/lib.rs, `tollgate-rls/src` for tollgate-rls/src/main.rs).
mapfile -t roots < <(cargo metadata --no-deps --format-version 1 --offline | perl -MJSON::PP -e '
    my $meta = decode_json(join "", <STDIN>);
    my $top = $meta->{workspace_root};
    my %seen;
    for my $package (@{ $meta->{packages} }) {
        for my $target (@{ $package->{targets} }) {
            next unless grep { /^(lib|rlib|bin|proc-macro)$/ } @{ $target->{kind} };
            (my $dir = $target->{src_path}) =~ s{/[^/]+$}{};
            $dir =~ s{^\Q$top\E/?}{};
            print "$dir\n" unless $seen{$dir}++;
        }
    }' | sort)
[ "${#roots[@]}" -gt 0 ] || { echo "cargo metadata names no crate root" >&2; exit 1; }

is_test_file() {
    case "$1" in
        */tests/*|*/tests.rs) return 0 ;;
        *) return 1 ;;
    esac
}

is_crate_root() {
    case "$1" in
        */lib.rs|*/main.rs) [ "${1%/*}" = "$2" ] ;;
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

for root in "${roots[@]}"; do
    while IFS= read -r file; do
        is_test_file "$file" && continue
        code=$(non_test_code "$file")
        lines=$(printf '%s\n' "$code" | wc -l)
        if [ "$lines" -gt "$MAX_LINES" ]; then
            echo "$file: $lines lines of non-test code (at most $MAX_LINES; split it, or move tests to a tests.rs)"
            failed=1
        fi
        is_crate_root "$file" "$root" && continue
        # Code only: comments (doc links included) name modules without depending on them.
        hits=$(printf '%s\n' "$code" | sed 's|^[[:space:]]*//.*||' | grep -nE 'crate::(\{|[A-Z])' || true)
        if [ -n "$hits" ]; then
            printf '%s\n' "$hits" | while IFS= read -r hit; do
                echo "$file:${hit%%:*}: import from the defining module, not the crate root: ${hit#*:}"
            done
            failed=1
        fi
        # Test-only modules under a name that says so: `#[cfg(test)] mod x;` only as `tests`.
        awk -v file="$file" '
            prev == "#[cfg(test)]" && $0 ~ /^ *(pub(\([a-z:]+\))? )?mod [a-z_]+;/ && $0 !~ /mod tests;/ {
                print file ":" NR ": a test-only module not named `tests`: " $0
                bad = 1
            }
            { prev = $0 }
            END { exit bad }
        ' "$file" || failed=1
    done < <(find "$root" -name '*.rs' | sort)
done

# The import graph of each crate, at every level: each circle; and each import of tollgate's
# store wrappers by the stores below them.
if ! perl - "${roots[@]}" <<'PERL'
use strict;
use warnings;

sub is_test_file { $_[0] =~ m{/tests/|/tests\.rs$} }

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

my (@wrong, $circles);
$circles = 0;
for my $root (@ARGV) {
    my @files = sort split /\n/, `find '$root' -name '*.rs'`;

    # The module path of a file: <root>/a/b.rs and <root>/a/b/mod.rs are (a, b); the crate
    # root (<root>/lib.rs, <root>/main.rs) is ().
    my $module_of = sub {
        my ($file) = @_;
        (my $path = $file) =~ s{^\Q$root\E/}{};
        $path =~ s{\.rs$}{};
        $path =~ s{(^|/)mod$}{};
        $path =~ s{^(lib|main)$}{};
        return $path eq '' ? () : split m{/}, $path;
    };
    my $is_module = sub {
        my $path = join '/', @_;
        return -f "$root/$path.rs" || -f "$root/$path/mod.rs";
    };
    # The module a path names from the file of module @from: its longest prefix that is a module.
    my $target_of = sub {
        my ($path, @from) = @_;
        my @segments = split /::/, $path;
        my $base = shift @segments;
        my @module;
        if ($base eq 'crate') {
            @module = ();
        } else {
            # `self` is the file's own module; `super` its parent (for <root>/a/b.rs, `a`).
            @module = @from;
            if ($base eq 'super') {
                pop @module;
                while (@segments && $segments[0] eq 'super') { shift @segments; pop @module; }
            }
        }
        for my $segment (@segments) {
            last unless $is_module->(@module, $segment);
            push @module, $segment;
        }
        return @module;
    };

    my %edges;
    for my $file (@files) {
        my @from = $module_of->($file);
        next unless @from;
        # tollgate's store wrappers: everything in store/ but the wrappers, the front door and
        # the tests is under them.
        my $in_backend = $root eq 'src' && $file =~ m{^src/store/}
            && $file !~ m{^src/store/(wrappers/|tests/|mod\.rs$)};
        next if is_test_file($file) && !$in_backend;
        my $code = code_of($file, is_test_file($file));
        for my $path (paths_in($code)) {
            my @to = $target_of->($path, @from);
            if ($in_backend && @to >= 2 && $to[0] eq "store" && $to[1] eq "wrappers") {
                push @wrong, "$file: imports the store wrappers ($path): the stores and the contract are below them";
            }
            next if is_test_file($file);
            my $k = 0;
            $k++ while $k < @from && $k < @to && $from[$k] eq $to[$k];
            # Its own module or an ancestor (a folder's front door), or a descendant (a
            # folder's mod.rs over its own children): no edge.
            next if $k == @to || $k == @from;
            my $level = join('/', $root, @from[0 .. $k - 1]);
            $edges{$level}{$from[$k]}{$to[$k]}{$file} = 1;
        }
    }

    # A library's public paths: each item has one. A module is public when every module on
    # its way down is declared `pub mod`; a `pub use` in a public module is a second path for
    # an item whose own module is public too, and two `pub use`s of one item are two paths.
    if (-f "$root/lib.rs") {
        my %public = ('' => 1);
        my @modules = sort { $a =~ tr{/}{} <=> $b =~ tr{/}{} } map { join '/', $module_of->($_) } @files;
        for my $module (@modules) {
            next if $module eq '';
            (my $parent = $module) =~ s{/?[^/]+$}{};
            (my $name = $module) =~ s{^.*/}{};
            my $front = $parent eq '' ? "$root/lib.rs"
                : -f "$root/$parent.rs" ? "$root/$parent.rs" : "$root/$parent/mod.rs";
            $public{$module} = $public{$parent} && code_of($front, 0) =~ /^\s*pub\s+mod\s+\Q$name\E\s*[;{]/m;
        }
        my %homes;
        for my $file (@files) {
            my @from = $module_of->($file);
            next if is_test_file($file) || !$public{ join '/', @from };
            my $code = code_of($file, 0);
            while ($code =~ /(?:^|[;}\n])\s*pub\s+use\s+([^;]+);/g) {
                (my $tree = $1) =~ s/\s+as\s+\w+//g;
                for my $path (expand($tree)) {
                    my @segments = split /::/, $path;
                    next if $segments[-1] eq '*';
                    my $first = $segments[0];
                    next unless $first =~ /^(crate|self|super)$/ || $is_module->(@from, $first);
                    $path = "self::$path" unless $first =~ /^(crate|self|super)$/;
                    my @to = $target_of->($path, @from);
                    my $name = $segments[-1];
                    # A module re-exported: its home is its parent.
                    pop @to if @to && $to[-1] eq $name;
                    my $at = join('::', 'crate', @from, $name);
                    push @{ $homes{ join('::', @to, $name) } }, $at;
                    my $own = join '/', @to;
                    next unless $public{$own} && join('/', @to) ne join('/', @from);
                    push @wrong, "$file: `pub use $path` gives $name a second public path ("
                        . join('::', 'crate', @to, $name) . " is public too): keep one of them";
                }
            }
        }
        for my $item (sort keys %homes) {
            next if @{ $homes{$item} } < 2;
            push @wrong, "$item has " . @{ $homes{$item} } . " public paths: "
                . join(', ', @{ $homes{$item} }) . ": keep one of them";
        }
    }

    # Circles: the strongly connected parts of each level's graph (Tarjan).
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
}
print "$_\n" for @wrong;
exit((@wrong || $circles) ? 1 : 0);
PERL
then
    failed=1
fi

# No `#[path = ..]` (nor `#[cfg_attr(.., path = ..)]`) in any Rust file of the workspace.
if hits=$(find . -name '*.rs' -not -path './.git/*' -not -path '*/target/*' -print0 | sort -z |
    xargs -0 grep -nE '#!?\[[[:space:]]*(path[[:space:]]*=|cfg_attr\(.*\bpath[[:space:]]*=)' /dev/null); then
    printf '%s\n' "$hits" | sed 's|^\./||; s/$/: a module included by path (a module of its own, the test kit, or the example'"'"'s own tests)/'
    failed=1
fi

# tollgate alone: the names `pub use`d at the crate root: `pub use a::B;` or `pub use a::{B, C};`.
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
