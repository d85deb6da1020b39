//! What every Redis store shares: the scripts, how a decision becomes a script call, how its
//! reply becomes a decision, the key layout and the sorting of errors. Generic over the
//! connection, so a standalone connection and a cluster connection run the same calls.

use std::fmt::Write as _;
use std::sync::LazyLock;

use deadpool_redis::redis::aio::ConnectionLike;
use deadpool_redis::redis::{self, Script};

use super::on_connection::OnConnection;
use crate::algorithm::Algorithm;
#[cfg(doc)]
use crate::lease::Lease;
use crate::quota::Policy;
use crate::store::check::Check;

/// The default key prefix: keys look like `tollgate:<policy>:<algorithm>:{<client key>}`.
pub(crate) const DEFAULT_PREFIX: &str = "tollgate";

/// The scripts one store runs, with their SHA-1s computed once.
pub(crate) struct Scripts {
    /// One per algorithm, in `Algorithm::ALL` order.
    single: [LuaScript; 7],
    /// `lua/plain_counter.lua`: a plain counter's decisions that need one atomic step.
    plain: LuaScript,
    /// `lua/plain_counters.lua`: plain counters decided together, a refusal consuming nothing.
    plain_together: LuaScript,
    /// Every algorithm's script and `lua/stacked.lua` in one: see [`STACKED_SOURCE`].
    stacked: LuaScript,
    /// `lua/control.lua`: reset, block and refund one client.
    control: LuaScript,
    /// The prelude and `lua/lease.lua`: leases for hot keys.
    lease: LuaScript,
    /// The prelude and `src/store/redis/lua/in_flight.lua`: slots of requests in flight.
    pub(super) in_flight: LuaScript,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            single: ALGORITHM_SOURCES
                .each_ref()
                .map(|s| LuaScript::new(s.as_str())),
            plain: LuaScript::new(PLAIN_SOURCE.as_str()),
            plain_together: LuaScript::new(PLAIN_TOGETHER_SOURCE.as_str()),
            stacked: LuaScript::new(STACKED_SOURCE.as_str()),
            control: LuaScript::new(CONTROL_SOURCE.as_str()),
            lease: LuaScript::new(LEASE_SOURCE.as_str()),
            in_flight: LuaScript::new(IN_FLIGHT_SOURCE.as_str()),
        }
    }

    /// The call that leases from `min` to `max` units of the state at `key` under `policy`
    /// (an algorithm of [`Lease::ALGORITHMS`]); `now` as for [`single`](Self::single).
    pub(crate) fn acquire(
        &self,
        key: String,
        policy: &Policy,
        (min, max): (u32, u32),
        now: &str,
    ) -> Call<'_> {
        self.lease(
            key,
            policy,
            "acquire",
            (u64::from(min), u64::from(max)),
            now,
        )
    }

    /// The call that gives `unused` units of the lease marked `mark` back.
    pub(crate) fn release(
        &self,
        key: String,
        policy: &Policy,
        (unused, mark): (u32, u64),
        now: &str,
    ) -> Call<'_> {
        self.lease(key, policy, "release", (u64::from(unused), mark), now)
    }

    fn lease(
        &self,
        key: String,
        policy: &Policy,
        op: &str,
        (a, b): (u64, u64),
        now: &str,
    ) -> Call<'_> {
        let p = policy.params();
        let numbers = [
            algorithm_index(policy.algorithm()) as u64 + 1,
            p.limit,
            p.period,
            p.burst,
            p.interval,
        ];
        let mut command = evalsha(&self.lease, &[key]);
        command.arg(&numbers[..]).arg(op).arg(a).arg(b).arg(now);
        Call::new(&self.lease, command)
    }

    /// The call that decides one request of `cost` for the state at `key` under `policy`;
    /// `now` is the store clock's µs, or `""` for Redis `TIME`.
    pub(crate) fn single(&self, key: String, policy: &Policy, cost: u32, now: &str) -> Call<'_> {
        self.one(key, policy, cost, now, Mode::Write)
    }

    /// The call that decides one request as [`single`](Self::single) does, and records its
    /// cost even when it is denied (`ARGV[7] = "c"`, charged while over): a stacked decision
    /// of one charged check, without the stacked script around it. Blocks nothing.
    pub(crate) fn charged(&self, key: String, policy: &Policy, cost: u32, now: &str) -> Call<'_> {
        self.one(key, policy, cost, now, Mode::Charge)
    }

    /// The call that decides one request as [`single`](Self::single) does, in a dry run
    /// (`ARGV[7] = "1"`): the algorithm's script decides exactly as usual and writes nothing.
    /// Every Redis store peeks with it.
    pub(crate) fn peek(&self, key: String, policy: &Policy, cost: u32, now: &str) -> Call<'_> {
        self.one(key, policy, cost, now, Mode::Dry)
    }

    fn one(&self, key: String, policy: &Policy, cost: u32, now: &str, mode: Mode) -> Call<'_> {
        let dry = mode == Mode::Dry;
        let p = policy.params();
        let numbers = [
            p.limit,
            p.period,
            p.burst,
            p.interval,
            // A dry run may look at cost 0: denied only past the limit (`State::look`).
            u64::from(if dry { cost } else { cost.max(1) }),
        ];
        // `single` was built from `Algorithm::ALL`, so every algorithm has its script.
        let script = match policy.plain_counter() {
            true => &self.plain,
            false => &self.single[algorithm_index(policy.algorithm())],
        };
        let mut command = evalsha(script, &[key]);
        command.arg(&numbers[..]).arg(now);
        if dry {
            // ARGV[7]: a dry run, which sets no block.
            command.arg("1");
        } else if mode == Mode::Charge {
            // ARGV[7]: charged while over, which sets no block either.
            command.arg("c");
        } else if policy.block_for_us() > 0 {
            // ARGV[7] (not a dry run) and ARGV[8], block_for: only for policies that block.
            command.arg("0").arg(policy.block_for_us());
        }
        Call::new(script, command)
    }

    /// The call that decides `checks` (whose state keys are `keys`) in one stacked script.
    /// A `dry` call decides and writes nothing, whatever the decisions (see `lua/stacked.lua`).
    pub(crate) fn stacked(
        &self,
        keys: Vec<String>,
        checks: &[Check<'_>],
        now: &str,
        dry: bool,
    ) -> Call<'_> {
        let mut numbers = Vec::with_capacity(8 * checks.len());
        for c in checks {
            let p = c.policy.params();
            numbers.extend([
                script_number(c.policy),
                p.limit,
                p.period,
                p.burst,
                p.interval,
                u64::from(c.cost.max(1)),
                // Flags: 1 blocking, + 2 charged (see `lua/stacked.lua`).
                u64::from(c.blocking) + 2 * u64::from(c.charge),
                c.policy.block_for_us(),
            ]);
        }
        let mut command = evalsha(&self.stacked, &keys);
        command.arg(now).arg(&numbers[..]);
        if dry {
            command.arg("dry");
        }
        Call::new(&self.stacked, command)
    }

    /// The call that acts on the state at `key` under `policy` (see `lua/control.lua`).
    pub(crate) fn control(
        &self,
        key: String,
        policy: &Policy,
        action: ClientAction,
        now: &str,
    ) -> Call<'_> {
        let (op, amount) = match action {
            ClientAction::Reset => ("reset", 0),
            ClientAction::Block(micros) => ("block", micros),
            ClientAction::Refund(units) => ("refund", units),
        };
        let p = policy.params();
        let numbers = [
            algorithm_index(policy.algorithm()) as u64 + 1,
            p.limit,
            p.period,
            p.burst,
            p.interval,
            amount,
        ];
        let mut command = evalsha(&self.control, &[key]);
        command.arg(op).arg(&numbers[..]).arg(now);
        Call::new(&self.control, command)
    }
}

impl Scripts {
    /// The call that decides the plain counters `checks` (at `keys`, distinct, none charged)
    /// together, at `now` µs: see `lua/plain_counters.lua`.
    pub(crate) fn plain_together(
        &self,
        keys: &[String],
        checks: &[Check<'_>],
        now: u64,
    ) -> Call<'_> {
        let mut numbers = Vec::with_capacity(4 * checks.len());
        for c in checks {
            let p = c.policy.params();
            numbers.extend([
                p.limit,
                p.period,
                u64::from(c.cost.max(1)),
                u64::from(c.blocking),
            ]);
        }
        let mut command = evalsha(&self.plain_together, keys);
        command.arg(now).arg(&numbers[..]);
        Call::new(&self.plain_together, command)
    }

    /// The call that gives `units` back to the plain counter at `key` (see
    /// `lua/plain_counter.lua`, `ARGV[7] = "r"`).
    pub(crate) fn plain_refund(
        &self,
        key: String,
        policy: &Policy,
        units: u32,
        now: &str,
    ) -> Call<'_> {
        let p = policy.params();
        let numbers = [p.limit, p.period, p.burst, p.interval, u64::from(units)];
        let mut command = evalsha(&self.plain, &[key]);
        command.arg(&numbers[..]).arg(now).arg("r");
        Call::new(&self.plain, command)
    }
}

/// How a single decision's script runs (its `ARGV[7]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Decides and writes when allowed (and blocks after a denial, if the policy blocks).
    Write,
    /// Decides and writes nothing.
    Dry,
    /// Decides, writes when allowed, and records a denial's cost too.
    Charge,
}

/// What [`Scripts::control`] does to one client.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ClientAction {
    /// Forget the state and any block.
    Reset,
    /// Block for this many µs from now (0: reset).
    Block(u64),
    /// Give back this many units.
    Refund(u64),
}

impl ClientAction {
    /// A block of `duration`, in µs as the script takes it.
    pub(crate) fn block(duration: std::time::Duration) -> Self {
        Self::Block(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
    }
}

/// One script call, ready to run on any connection.
pub(crate) struct Call<'a> {
    script: &'a LuaScript,
    /// `EVALSHA <sha> <number of keys> <keys…> <arguments…>`, written once: every argument
    /// goes straight into the command's buffer (a list of byte vectors cost an allocation each).
    command: redis::Cmd,
}

/// The start of a call of `script` on `keys`: `EVALSHA <sha> <number of keys> <keys…>`.
pub(super) fn evalsha(script: &LuaScript, keys: &[String]) -> redis::Cmd {
    let mut command = redis::cmd("EVALSHA");
    command.arg(&script.sha).arg(keys.len());
    for key in keys {
        command.arg(key.as_str());
    }
    command
}

impl<'a> Call<'a> {
    pub(super) fn new(script: &'a LuaScript, command: redis::Cmd) -> Self {
        Self { script, command }
    }

    /// `EVALSHA`; on `NOSCRIPT` (a restart, failover or `SCRIPT FLUSH` emptied the script
    /// cache of the node that holds the keys), `EVAL` with the source, which runs it and caches
    /// it again in one round trip and, unlike `SCRIPT LOAD` + `EVALSHA`, cannot race with
    /// another flush. On a cluster both go to the node of the first key.
    async fn run<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
    ) -> redis::RedisResult<Vec<i64>> {
        match self.command.query_async(connection).await {
            // Boxed, as it is rare: the common path's future keeps no room for it.
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                Box::pin(self.eval().query_async(connection)).await
            }
            result => result,
        }
    }

    /// The same call as `EVAL <source> …`: everything after the SHA as it is.
    fn eval(&self) -> redis::Cmd {
        let mut command = redis::cmd("EVAL");
        command.arg(self.script.source);
        for arg in self.command.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                command.arg(bytes);
            }
        }
        command
    }
}

impl OnConnection for Call<'_> {
    type Output = Vec<i64>;

    fn run_on<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
    ) -> impl std::future::Future<Output = redis::RedisResult<Vec<i64>>> + Send {
        self.run(connection)
    }
}

/// A script's source and SHA-1.
pub(super) struct LuaScript {
    source: &'static str,
    sha: String,
}

impl LuaScript {
    fn new(source: &'static str) -> Self {
        Self {
            source,
            sha: Script::new(source).get_hash().to_owned(),
        }
    }
}

/// The Redis key that holds `client_key`'s state under `policy`:
/// `<prefix>:<policy name>:<algorithm>:{<client key>}`.
pub(crate) fn state_key(prefix: &str, policy: &Policy, client_key: &str) -> String {
    format!(
        "{}:{}:{}:{{{}}}",
        prefix,
        policy.name(),
        key_part(policy.algorithm()),
        client_key
    )
}

/// What every script shares (the helpers of its rare paths: blocks, state it cannot read),
/// written once in `lua/prelude.lua` and put in front of each script.
const PRELUDE: &str = include_str!("lua/prelude.lua");

/// How every algorithm's script reads its arguments and the clock, written once in
/// `lua/request.lua` and put at the top of each (plain statements: a helper function would be
/// one more closure built on every call).
const REQUEST: &str = include_str!("lua/request.lua");

/// `lua/control.lua` as it runs: the prelude in front.
static CONTROL_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("{PRELUDE}\n{}", include_str!("lua/control.lua")));

/// Each algorithm's script as it runs, in `Algorithm::ALL` order: the prelude, then
/// `lua/request.lua` and `lua/<algorithm>.lua`. Assembled once per process.
static ALGORITHM_SOURCES: LazyLock<[String; 7]> =
    LazyLock::new(|| Algorithm::ALL.map(|a| format!("{PRELUDE}\n{}", algorithm_body(a))));

/// The script a stacked decision runs: the prelude, then each algorithm's script wrapped as a
/// function of its own `KEYS` and `ARGV` (`ALGORITHMS[i]`, 1-based in `Algorithm::ALL` order;
/// names that share a script share the function),
/// then `lua/stacked.lua`, which calls them. Wrapping keeps every algorithm in exactly one file,
/// the one its single decisions run: a script's body is valid as a Lua 5.1 function body
/// (its locals become the function's, and each `return` ends its block), and `ALGORITHMS` is a
/// local because Redis forbids scripts to create globals. Assembled once per process.
static STACKED_SOURCE: LazyLock<String> = LazyLock::new(|| {
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

/// The in-flight script as it runs: the prelude, then `src/store/redis/lua/in_flight.lua`.
static IN_FLIGHT_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("{PRELUDE}\n{}", include_str!("lua/in_flight.lua")));

/// `lua/plain_counter.lua`, a plain counter's own file.
const PLAIN: &str = include_str!("lua/plain_counter.lua");

/// A plain counter's script as it runs: the prelude, `lua/request.lua`, then
/// `lua/plain_counter.lua`.
static PLAIN_SOURCE: LazyLock<String> = LazyLock::new(|| format!("{PRELUDE}\n{REQUEST}\n{PLAIN}"));

/// `lua/plain_counters.lua` as it runs: the prelude in front.
static PLAIN_TOGETHER_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("{PRELUDE}\n{}", include_str!("lua/plain_counters.lua")));

/// The stacked script's number of a plain counter's function: after the seven algorithms'.
const PLAIN_NUMBER: u64 = 8;

/// The number of `policy`'s function in the stacked script (1-based, `Algorithm::ALL` order,
/// then [`PLAIN_NUMBER`]).
fn script_number(policy: &Policy) -> u64 {
    match policy.plain_counter() {
        true => PLAIN_NUMBER,
        false => algorithm_index(policy.algorithm()) as u64 + 1,
    }
}

/// The lease script as it runs: the prelude, then `lua/lease.lua`.
static LEASE_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("{PRELUDE}\n{}", include_str!("lua/lease.lua")));

/// An algorithm's place in `Algorithm::ALL` (0-based): the index of its script in
/// `Scripts::single`, and one less than its number in the stacked script.
fn algorithm_index(algorithm: Algorithm) -> usize {
    Algorithm::ALL
        .iter()
        .position(|a| *a == algorithm)
        .unwrap_or_default()
}

/// The algorithm's part of a state key: short, since every tracked client pays for it.
fn key_part(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::Gcra => "gcra",
        Algorithm::TokenBucket => "tb",
        Algorithm::LeakyBucket => "lb",
        Algorithm::FixedWindow => "fw",
        Algorithm::FixedWindowFromFirst => "fwf",
        Algorithm::SlidingWindowLog => "swl",
        Algorithm::SlidingWindow => "sw",
    }
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
