//! What the algorithm tests share: a memory store on a manual clock, and short ways to write the
//! decisions they expect.

use std::time::Duration;

use crate::algorithm::{Algorithm, Params};
use crate::clock::ManualClock;
use crate::decision::Decision;
use crate::quota::{Policy, Quota};
use crate::store::MemoryStore;

/// The three bucket algorithms: they admit exactly the same requests.
pub(in crate::algorithm) const BUCKETS: [Algorithm; 3] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::LeakyBucket,
];

/// Midnight UTC, µs: a multiple of every period the tests use.
pub(in crate::algorithm) const ALIGNED: u64 = 1_699_920_000_000_000;

/// A time aligned to nothing, µs.
pub(in crate::algorithm) const UNALIGNED: u64 = 1_699_920_000_123_457;

/// A memory store on a manual clock at `t0`, and a policy of `quota` under `algorithm`.
pub(in crate::algorithm) fn setup(
    algorithm: Algorithm,
    t0: u64,
    quota: Quota,
) -> (MemoryStore, ManualClock, Policy) {
    let clock = ManualClock::new(t0);
    let store = MemoryStore::with_clock(clock.clone());
    let policy = Policy::new(algorithm.as_str(), quota, algorithm).unwrap();
    (store, clock, policy)
}

/// `Decision::from_micros` with the limit first, as a reader checks a row.
pub(in crate::algorithm) fn d(
    limit: u64,
    allowed: bool,
    remaining: u64,
    reset: u64,
    retry: Option<u64>,
) -> Decision {
    Decision::from_micros(allowed, limit, remaining, reset, retry)
}

/// A bucket's decision for a request of `cost` on key `"k"`, checked to carry the burst as its
/// limit: `(allowed, remaining, reset_after µs, retry_after µs, delay µs)`. The delay is how long
/// the leaky bucket's delay mode holds the request; it depends on the decision alone, so it is
/// the same under all three buckets.
pub(in crate::algorithm) fn decide(
    store: &MemoryStore,
    policy: &Policy,
    cost: u32,
) -> (bool, u64, u64, Option<u64>, u64) {
    let d = store.check_now("k", policy, cost);
    assert_eq!(d.limit, policy.params().burst, "{}", policy.algorithm());
    (
        d.allowed,
        d.remaining,
        d.reset_after.as_micros() as u64,
        d.retry_after.map(|r| r.as_micros() as u64),
        delay(policy.params(), &d, u64::from(cost)).as_micros() as u64,
    )
}

/// Spends a whole burst of `burst` cost-1 requests on a bucket of emission interval `t` µs, and
/// is then denied for `t`.
pub(in crate::algorithm) fn spend_burst(store: &MemoryStore, policy: &Policy, burst: u64, t: u64) {
    let a = policy.algorithm();
    for i in 1..=burst {
        let expected = (true, burst - i, i * t, None, (i - 1) * t);
        assert_eq!(decide(store, policy, 1), expected, "{a}, request {i}");
    }
    let expected = (false, 0, burst * t, Some(t), 0);
    assert_eq!(decide(store, policy, 1), expected, "{a}");
}

/// How long an allowed leaky-bucket request of `cost` waits for its first slot (`start − now`),
/// from its decision alone, so it works the same whatever store made it.
///
/// After an allowed request `reset_after = end + T − now = start + c·T − now`. Zero for a
/// denied decision. A model the tests check `reset_after` against; the layer's delay mode
/// waits only past the burst.
pub(in crate::algorithm) fn delay(p: &Params, decision: &Decision, cost: u64) -> Duration {
    if !decision.allowed {
        return Duration::ZERO;
    }
    let held = cost.max(1).saturating_mul(p.interval.max(1));
    let reset_after = u64::try_from(decision.reset_after.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(reset_after.saturating_sub(held))
}
