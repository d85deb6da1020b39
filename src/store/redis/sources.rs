//! The scripts' sources as `EVALSHA` runs them: each `lua/` file with the prelude (and the
//! request's reading of its arguments) in front, assembled once, and the stacked script's
//! numbering of its functions.

use std::fmt::Write as _;
use std::sync::LazyLock;

use crate::algorithm::Algorithm;
use crate::quota::Policy;

/// What every script shares (the helpers of its rare paths: blocks, state it cannot read),
/// written once in `lua/prelude.lua` and put in front of each script.
const PRELUDE: &str = include_str!("lua/prelude.lua");

/// How every algorithm's script reads its arguments and the clock, written once in
/// `lua/request.lua` and put at the top of each (plain statements: a helper function would be
/// one more closure built on every call).
const REQUEST: &str = include_str!("lua/request.lua");

/// `lua/control.lua` as it runs: the prelude in front.
pub(super) static CONTROL_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("{PRELUDE}\n{}", include_str!("lua/control.lua")));

/// Each algorithm's script as it runs, in `Algorithm::ALL` order: the prelude, then
/// `lua/request.lua` and `lua/<algorithm>.lua`. Assembled once per process.
pub(super) static ALGORITHM_SOURCES: LazyLock<[String; 7]> =
    LazyLock::new(|| Algorithm::ALL.map(|a| format!("{PRELUDE}\n{}", algorithm_body(a))));

/// The script a stacked decision runs: the prelude, then each algorithm's script wrapped as a
/// function of its own `KEYS` and `ARGV` (`ALGORITHMS[i]`, 1-based in `Algorithm::ALL` order;
/// names that share a script share the function),
/// then `lua/stacked.lua`, which calls them. Wrapping keeps every algorithm in exactly one file,
/// the one its single decisions run: a script's body is valid as a Lua 5.1 function body
/// (its locals become the function's, and each `return` ends its block), and `ALGORITHMS` is a
/// local because Redis forbids scripts to create globals. Assembled once per process.
pub(super) static STACKED_SOURCE: LazyLock<String> = LazyLock::new(|| {
    let mut source = format!("{PRELUDE}\nlocal ALGORITHMS = {{}}\n");
    for (i, algorithm) in Algorithm::ALL.into_iter().enumerate() {
        let body = algorithm_body(algorithm);
        let first = Algorithm::ALL
            .iter()
            .position(|a| script_source(*a) == script_source(algorithm));
        let _ = match first {
            // Two names, one engine: the function is written once.
            Some(j) if j < i => writeln!(source, "ALGORITHMS[{}] = ALGORITHMS[{}]", i + 1, j + 1),
            // The newline before `end`: a last line that is a comment would swallow it.
            _ => write!(
                source,
                "ALGORITHMS[{}] = function(KEYS, ARGV)\n{body}\nend\n",
                i + 1
            ),
        };
    }
    // A plain counter is the stacked script's function number 8 (`script_number`).
    let _ = write!(
        source,
        "ALGORITHMS[{PLAIN_NUMBER}] = function(KEYS, ARGV)\n{REQUEST}\n{PLAIN}\nend\n"
    );
    source.push_str(include_str!("lua/stacked.lua"));
    source
});

/// The override script as it runs: the prelude, then `src/store/redis/lua/quota.lua`.
pub(super) static QUOTA_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("{PRELUDE}\n{}", include_str!("lua/quota.lua")));
/// The in-flight script as it runs: the prelude, then `src/store/redis/lua/in_flight.lua`.
pub(super) static IN_FLIGHT_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("{PRELUDE}\n{}", include_str!("lua/in_flight.lua")));

/// `lua/plain_counter.lua`, a plain counter's own file.
const PLAIN: &str = include_str!("lua/plain_counter.lua");

/// A plain counter's script as it runs: the prelude, `lua/request.lua`, then
/// `lua/plain_counter.lua`.
pub(super) static PLAIN_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("{PRELUDE}\n{REQUEST}\n{PLAIN}"));

/// `lua/plain_counters.lua` as it runs: the prelude in front.
pub(super) static PLAIN_TOGETHER_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("{PRELUDE}\n{}", include_str!("lua/plain_counters.lua")));

/// The stacked script's number of a plain counter's function: after the seven algorithms'.
const PLAIN_NUMBER: u64 = 8;

/// The number of `policy`'s function in the stacked script (1-based, `Algorithm::ALL` order,
/// then [`PLAIN_NUMBER`]).
pub(super) fn script_number(policy: &Policy) -> u64 {
    match policy.plain_counter() {
        true => PLAIN_NUMBER,
        false => algorithm_index(policy.algorithm()) as u64 + 1,
    }
}

/// The lease script as it runs: the prelude, then `lua/lease.lua`.
pub(super) static LEASE_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("{PRELUDE}\n{}", include_str!("lua/lease.lua")));

/// An algorithm's place in `Algorithm::ALL` (0-based): the index of its script in
/// `Scripts::single`, and one less than its number in the stacked script.
pub(super) fn algorithm_index(algorithm: Algorithm) -> usize {
    Algorithm::ALL
        .iter()
        .position(|a| *a == algorithm)
        .unwrap_or_default()
}

/// An algorithm's script without the prelude: `lua/request.lua`, then `lua/<algorithm>.lua`.
fn algorithm_body(algorithm: Algorithm) -> String {
    format!("{REQUEST}\n{}", script_source(algorithm))
}

/// The Lua source of an algorithm's own file.
fn script_source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        // The leaky bucket decides exactly as GCRA, and runs its engine: see src/algorithm/gcra.rs.
        Algorithm::Gcra | Algorithm::LeakyBucket => include_str!("lua/gcra.lua"),
        Algorithm::TokenBucket => include_str!("lua/token_bucket.lua"),
        Algorithm::FixedWindow => include_str!("lua/fixed_window.lua"),
        Algorithm::FixedWindowFromFirst => include_str!("lua/fixed_window_from_first.lua"),
        Algorithm::SlidingWindowLog => include_str!("lua/sliding_window_log.lua"),
        Algorithm::SlidingWindow => include_str!("lua/sliding_window.lua"),
    }
}
