//! What every Redis store shares: the scripts (their sources are assembled in `sources.rs`),
//! how a decision becomes a script call, and the key layout (`reply.rs` reads the replies and
//! sorts the errors). Generic over the connection, so a standalone connection and a cluster
//! connection run the same calls.

use deadpool_redis::redis::aio::ConnectionLike;
use deadpool_redis::redis::{self, Script};

use super::on_connection::OnConnection;
use super::sources::{
    algorithm_index, script_number, ALGORITHM_SOURCES, CONTROL_SOURCE, IN_FLIGHT_SOURCE,
    LEASE_SOURCE, PLAIN_SOURCE, PLAIN_TOGETHER_SOURCE, QUOTA_SOURCE, STACKED_SOURCE,
};
use crate::algorithm::Algorithm;
#[cfg(doc)]
use crate::lease::Lease;
use crate::quota::{Policy, Quota};
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
    /// Every algorithm's script and `lua/stacked.lua` in one: see `STACKED_SOURCE` in `sources.rs`.
    stacked: LuaScript,
    /// `lua/control.lua`: reset, block and refund one client.
    control: LuaScript,
    /// The prelude and `lua/lease.lua`: leases for hot keys.
    lease: LuaScript,
    /// The prelude and `lua/quota.lua`: quotas set for clients at run time.
    quota: LuaScript,
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
            quota: LuaScript::new(QUOTA_SOURCE.as_str()),
            in_flight: LuaScript::new(IN_FLIGHT_SOURCE.as_str()),
        }
    }

    /// The call that reads (`None`), sets (a quota, for `ttl_ms`, 0 for ever) or clears
    /// (`Some(None)`) the quota set for a client, at `key` (see `lua/quota.lua`).
    pub(crate) fn quota(&self, key: String, set: Option<Option<(Quota, u64)>>) -> Call<'_> {
        let mut command = evalsha(&self.quota, &[key]);
        match set {
            None => command.arg("get"),
            Some(None) => command.arg("clear"),
            Some(Some((quota, ttl_ms))) => command.arg("set").arg(&quota.numbers()[..]).arg(ttl_ms),
        };
        Call::new(&self.quota, command)
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
        if let Some(home) = home_of(policy) {
            // ARGV[10], ARGV[11]: the rule's scale, for a client's own quota.
            command.arg(&home[..]);
        }
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
        let home = home_of(policy);
        if dry {
            // ARGV[7]: a dry run, which sets no block.
            command.arg("1");
            if home.is_some() {
                command.arg("0");
            }
        } else if mode == Mode::Charge {
            // ARGV[7]: charged while over, which sets no block either (ARGV[8], if the rule's
            // scale follows).
            command.arg("c");
            if home.is_some() {
                command.arg("0");
            }
        } else if policy.block_for_us() > 0 || home.is_some() {
            // ARGV[7] (not a dry run) and ARGV[8], block_for: only for policies that block,
            // or that need ARGV[9] and ARGV[10].
            command.arg("0").arg(policy.block_for_us());
        }
        if let Some(home) = home {
            // ARGV[9], ARGV[10]: the rule's scale, for a client's own quota.
            command.arg(&home[..]);
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
        let mut numbers = Vec::with_capacity(10 * checks.len());
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
            numbers.extend(home_of(c.policy).unwrap_or([0, 0]));
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
        if let Some(home) = home_of(policy) {
            // ARGV[9], ARGV[10]: the rule's scale, for a client's own quota.
            command.arg(&home[..]);
        }
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

/// The rule's scale (`T`, `B`) of a policy that is a client's own quota under a rule of
/// another, which the bucket scripts read plain states in and mark their writes against (see
/// `algorithm::Scale`); `None` for every other policy.
fn home_of(policy: &Policy) -> Option<[u64; 2]> {
    let p = policy.params();
    p.mark(policy.algorithm())
        .map(|_| [p.home.interval, p.home.burst])
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

/// The Redis key of the quota set for `client_key` under the rule named `rule`:
/// `<prefix>:<rule>:quota:{<client key>}`, in the client's hash slot.
pub(crate) fn quota_key(prefix: &str, rule: &str, client_key: &str) -> String {
    format!("{prefix}:{rule}:quota:{{{client_key}}}")
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
