//! The seven algorithms as pure state machines.
//!
//! Each file holds one algorithm's state and its `check`: the reference that the matching
//! `store/redis/lua/<algorithm>.lua` script must agree with, decision for decision. All time
//! is integer microseconds; a denied request never changes state.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::decision::Decision;
use crate::error::{ConfigError, ConfigErrorKind};

mod encoding;
mod fixed_window;
mod fixed_window_from_first;
mod gcra;
mod lease;
mod scale;
mod sliding_window;
mod sliding_window_log;
pub(crate) mod slots;
mod token_bucket;
mod window;

pub(crate) use encoding::Saved;
#[cfg(any(feature = "memcached", feature = "redis"))]
pub(crate) use fixed_window::window_start;
pub(crate) use gcra::Gcra;
pub(crate) use scale::{rescaled, Scale};

/// How requests are counted against a [`Quota`](crate::Quota). See the
/// [algorithms guide](crate::guide::algorithms) for when to pick which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// Generic cell rate algorithm: a smooth rate with bursts up to the burst size; one
    /// timestamp per key. The default.
    #[default]
    Gcra,
    /// A bucket of `burst` tokens refilled continuously at `limit` per `period`.
    TokenBucket,
    /// A queue drained at a steady rate; admits what GCRA admits (it runs GCRA's engine), and in
    /// the layer's delay mode an allowed request waits for its slot.
    LeakyBucket,
    /// `limit` requests per window aligned to the epoch; up to `2 × limit` around a boundary.
    FixedWindow,
    /// A window that opens at a key's first request; the full quota returns `period` later.
    FixedWindowFromFirst,
    /// The exact log of allowed requests in the last `period`. Memory grows with `limit`.
    SlidingWindowLog,
    /// Two fixed-window counters weighted into a sliding estimate; two numbers per key.
    SlidingWindow,
}

impl Algorithm {
    /// Every algorithm, in declaration order.
    pub const ALL: [Algorithm; 7] = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::FixedWindow,
        Algorithm::FixedWindowFromFirst,
        Algorithm::SlidingWindowLog,
        Algorithm::SlidingWindow,
    ];

    /// The snake_case name used in rules files and environment variables.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Algorithm::Gcra => "gcra",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::FixedWindowFromFirst => "fixed_window_from_first",
            Algorithm::SlidingWindowLog => "sliding_window_log",
            Algorithm::SlidingWindow => "sliding_window",
        }
    }

    /// Whether the quota's burst means anything to this algorithm.
    pub(crate) const fn uses_burst(&self) -> bool {
        matches!(
            self,
            Algorithm::Gcra | Algorithm::TokenBucket | Algorithm::LeakyBucket
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
                ConfigError::with_kind(
                    ConfigErrorKind::Rule,
                    format!("unknown algorithm {s:?} (use one of {})", names.join(", ")),
                )
            })
    }
}

/// A quota in integer microseconds, as every algorithm and Lua script computes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Params {
    /// `L`: requests per period.
    pub(crate) limit: u64,
    /// `P`: the period in µs.
    pub(crate) period: u64,
    /// `B`: bucket capacity (equals `limit` for window algorithms).
    pub(crate) burst: u64,
    /// `T = ceil(P / L)` in µs: the emission interval of the bucket algorithms. Rounded up so
    /// that a key never gets more than `limit` per `period` once its burst is spent.
    pub(crate) interval: u64,
    /// The scale of the rule these params decide for (its own quota's): a bucket's state in
    /// another scale is kept with a mark saying which (see [`Scale`]). Its own, unless the
    /// params are a client's quota under a rule of another.
    pub(crate) home: Scale,
}

impl Params {
    /// `limit` requests per `period` with a bucket of `capacity`, as `algorithm` counts them
    /// (the window algorithms' capacity is their limit).
    pub(crate) fn new(limit: u32, period: Duration, capacity: u32, algorithm: Algorithm) -> Self {
        let limit = u64::from(limit);
        let period = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
        let burst = if algorithm.uses_burst() {
            u64::from(capacity)
        } else {
            limit
        };
        let interval = period.div_ceil(limit.max(1));
        Self {
            limit,
            period,
            burst,
            interval,
            home: Scale { interval, burst },
        }
    }
}

/// One key's state under any algorithm. `State::new` is a key never seen (or expired).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum State {
    Gcra(gcra::Gcra),
    TokenBucket(token_bucket::TokenBucket),
    /// The GCRA engine: see `gcra`'s docs.
    LeakyBucket(gcra::Gcra),
    FixedWindow(fixed_window::FixedWindow),
    FixedWindowFromFirst(fixed_window_from_first::FixedWindowFromFirst),
    SlidingWindowLog(sliding_window_log::SlidingWindowLog),
    SlidingWindow(sliding_window::SlidingWindow),
}

/// The decision for a request of `cost` at `now` by a client blocked until `until`: denied,
/// nothing left, whole again and allowed when the block ends (never, for a cost above the
/// capacity).
pub(crate) fn blocked(p: &Params, now: u64, until: u64, cost: u64) -> Decision {
    let rest = until.saturating_sub(now);
    let retry_after = (cost.max(1) <= p.burst).then_some(rest);
    Decision::from_micros(false, p.burst, 0, rest, retry_after)
}

impl State {
    /// The state of a key that has no history.
    pub(crate) fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::Gcra => State::Gcra(Default::default()),
            Algorithm::TokenBucket => State::TokenBucket(Default::default()),
            Algorithm::LeakyBucket => State::LeakyBucket(Default::default()),
            Algorithm::FixedWindow => State::FixedWindow(Default::default()),
            Algorithm::FixedWindowFromFirst => State::FixedWindowFromFirst(Default::default()),
            Algorithm::SlidingWindowLog => State::SlidingWindowLog(Default::default()),
            Algorithm::SlidingWindow => State::SlidingWindow(Default::default()),
        }
    }

    /// Decides a request of `cost` (≥ 1) at `now` µs; updates the state only when allowed.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let cost = cost.max(1);
        match self {
            State::Gcra(s) => s.check(p, now, cost),
            State::TokenBucket(s) => s.check(p, now, cost),
            State::LeakyBucket(s) => s.check(p, now, cost),
            State::FixedWindow(s) => s.check(p, now, cost),
            State::FixedWindowFromFirst(s) => s.check(p, now, cost),
            State::SlidingWindowLog(s) => s.check(p, now, cost),
            State::SlidingWindow(s) => s.check(p, now, cost),
        }
    }

    /// Decides a request of `cost` (≥ 1) at `now` and records its cost even when it is
    /// denied: "charged while over", as Envoy's rate limit service counts every hit. An
    /// allowed request is stored as [`check`](Self::check) stores it; a denied one takes the
    /// state past its limit, by at most one more quota (each algorithm's `record` says how),
    /// so that a flood keeps its state bounded. Returns the decision `check` made.
    pub(crate) fn charge(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let cost = cost.max(1);
        let decision = self.check(p, now, cost);
        if !decision.allowed {
            match self {
                State::Gcra(s) | State::LeakyBucket(s) => s.record(p, now, cost),
                State::TokenBucket(s) => s.record(p, now, cost),
                State::FixedWindow(s) => s.record(p, now, cost),
                State::FixedWindowFromFirst(s) => s.record(p, now, cost),
                State::SlidingWindowLog(s) => s.record(p, now, cost),
                State::SlidingWindow(s) => s.record(p, now, cost),
            }
        }
        decision
    }

    /// A look at `now` that consumes nothing: the decision for a request of cost 0, which
    /// is denied only when the state is past its limit (charged while over), and whose
    /// `remaining` is what is left.
    pub(crate) fn look(&self, p: &Params, now: u64) -> Decision {
        let mut copy = self.clone();
        match &mut copy {
            State::Gcra(s) | State::LeakyBucket(s) => s.check(p, now, 0),
            State::TokenBucket(s) => s.check(p, now, 0),
            State::FixedWindow(s) => s.check(p, now, 0),
            State::FixedWindowFromFirst(s) => s.check(p, now, 0),
            State::SlidingWindowLog(s) => s.check(p, now, 0),
            State::SlidingWindow(s) => s.check(p, now, 0),
        }
    }

    /// The time (µs) from which this state decides exactly like `State::new`, so a store may
    /// forget it. Redis keys get the same expiry as a TTL.
    pub(crate) fn expires_at(&self, p: &Params) -> u64 {
        match self {
            State::Gcra(s) => s.expires_at(p),
            State::TokenBucket(s) => s.expires_at(p),
            State::LeakyBucket(s) => s.expires_at(p),
            State::FixedWindow(s) => s.expires_at(p),
            State::FixedWindowFromFirst(s) => s.expires_at(p),
            State::SlidingWindowLog(s) => s.expires_at(p),
            State::SlidingWindow(s) => s.expires_at(p),
        }
    }

    /// Gives back `n` units at `now`, as far as the algorithm allows (see `Store::refund`).
    pub(crate) fn refund(&mut self, p: &Params, now: u64, n: u64) {
        match self {
            State::Gcra(s) | State::LeakyBucket(s) => s.refund(p, now, n),
            State::TokenBucket(s) => s.refund(p, now, n),
            State::FixedWindow(s) => s.refund(p, now, n),
            State::FixedWindowFromFirst(s) => s.refund(p, now, n),
            State::SlidingWindowLog(s) => s.refund(n),
            State::SlidingWindow(s) => s.refund(p, now, n),
        }
    }
}

#[cfg(test)]
mod tests;
