//! What every algorithm promises, checked on [`State`] for each one in [`Algorithm::ALL`].
//! Hand-computed sequences that several algorithms decide alike are in `shared.rs`, the setup
//! they all use in `support.rs`; the algorithm files keep only what is their own.

mod shared;
pub(super) mod support;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::*;
use crate::quota::{Policy, Quota};

/// Cases per algorithm.
const CASES: u32 = 1_000;
/// The longest period a quota may have (365 days), in µs.
const MAX_PERIOD: u64 = 365 * 86_400_000_000;
/// The longest time a full bucket may take to drain (100 years), in µs.
const MAX_BUCKET_SPAN: u64 = 100 * MAX_PERIOD;

/// `Params` of a valid policy for `algorithm`: small quotas with periods from 50 µs, and
/// large ones (limits up to `u32::MAX`, periods up to a year) where `f64` rounding shows.
/// Window algorithms get `burst == limit`; bucket algorithms any burst from 1.
pub(super) fn params(algorithm: Algorithm) -> impl Strategy<Value = Params> {
    let small = (1u32..=20, 50u64..=5_000);
    let large = (1u32..=u32::MAX, 50u64..=MAX_PERIOD);
    let burst = prop_oneof![1u32..=20, 1u32..=u32::MAX];
    (prop_oneof![small, large], burst).prop_map(move |((limit, period), burst)| {
        // At most one request per µs.
        let limit = limit.min(u32::try_from(period).unwrap_or(u32::MAX));
        let mut quota = Quota::new(limit, Duration::from_micros(period)).unwrap();
        if algorithm.uses_burst() {
            let interval = period.div_ceil(u64::from(limit));
            let most = u32::try_from(MAX_BUCKET_SPAN / interval).unwrap_or(u32::MAX);
            quota = quota.burst(burst.min(most)).unwrap();
        }
        *Policy::new("p", quota, algorithm)
            .expect("a valid quota")
            .params()
    })
}

/// Where a history starts, µs: at 0, near it, at a realistic time, and up to 2^52.
pub(super) fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        0u64..1_000,
        Just(1_700_000_000_000_000),
        0u64..=1 << 52,
        Just(1 << 52),
    ]
}

/// One request of a history.
#[derive(Debug, Clone, Copy)]
pub(super) struct Step {
    /// A few µs the clock moves.
    micros: u64,
    /// And this share (‰) of the time a spent quota takes to come back.
    per_mille: u64,
    /// Whether the clock goes back by that much instead.
    back: bool,
    /// The cost, scaled to the capacity (see [`Step::cost`]).
    units: u64,
}

impl Step {
    /// The clock after this step, from `now`.
    pub(super) fn next(&self, now: u64, p: &Params, algorithm: Algorithm) -> u64 {
        // `B·T` for the buckets, `P` for the windows.
        let horizon = if algorithm.uses_burst() {
            p.burst * p.interval
        } else {
            p.period
        };
        let advance = self.micros
            + horizon / 1_000 * self.per_mille
            + horizon % 1_000 * self.per_mille / 1_000;
        if self.back {
            now.saturating_sub(advance)
        } else {
            now + advance
        }
    }

    /// 1, `units` twentieths of the capacity (at least 1), or more than the capacity.
    pub(super) fn cost(&self, p: &Params) -> u64 {
        match self.units {
            0 => p.burst + 1,
            21 => 1,
            22 => 2 * p.burst + 1,
            u => (u * p.burst / 20).max(1),
        }
    }
}

/// Up to 80 requests; when `clock_goes_back`, now and then the clock goes back.
pub(super) fn history(clock_goes_back: bool) -> impl Strategy<Value = Vec<Step>> {
    let back = prop::bool::weighted(if clock_goes_back { 0.1 } else { 0.0 });
    let per_mille = prop_oneof![Just(0u64), 0u64..=50, 0u64..=1_200];
    let units = prop_oneof![8 => 1u64..=20, 2 => Just(21u64), 1 => Just(0u64), 1 => Just(22u64)];
    let step =
        (0u64..4, per_mille, back, units).prop_map(|(micros, per_mille, back, units)| Step {
            micros,
            per_mille,
            back,
            units,
        });
    prop::collection::vec(step, 1..80)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap()
}

/// What a denied request at `now` leaves of `state`: all of it, but for the log's expired
/// entries.
fn after_denial(state: &State, p: &Params, now: u64) -> State {
    match state {
        State::SlidingWindowLog(log) => State::SlidingWindowLog(log.without_expired(p, now)),
        other => other.clone(),
    }
}

/// Checks every promise along one history. With `forget`, the state is dropped once it
/// expires, as a store does.
fn promises_hold(
    algorithm: Algorithm,
    p: &Params,
    start: u64,
    forget: bool,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let fresh = State::new(algorithm);
    let capacity = p.burst;
    let mut state = fresh.clone();
    let mut now = start;
    for step in steps {
        let before_step = now;
        now = step.next(now, p, algorithm);
        let cost = step.cost(p);
        if forget && now >= state.expires_at(p) {
            state = fresh.clone();
        }
        let before = state.clone();
        let decision = state.check(p, now, cost);
        prop_assert_eq!(decision.limit, capacity);
        prop_assert!(decision.remaining <= capacity);
        if let State::SlidingWindowLog(log) = &state {
            prop_assert!(log.is_well_formed(p));
        }

        if decision.allowed {
            prop_assert_eq!(decision.retry_after, None);
            prop_assert!(state.expires_at(p) > now);
        } else {
            // A denied request changes no state (the log only drops expired entries).
            prop_assert_eq!(&state, &after_denial(&before, p, now));
            // It can never pass exactly when its cost is above the capacity; else it
            // passes `retry_after` later and not a µs sooner.
            prop_assert_eq!(decision.retry_after.is_none(), cost > capacity);
            if let Some(retry) = decision.retry_after {
                let d = micros(retry);
                prop_assert!(d >= 1);
                for s in [&before, &state] {
                    prop_assert!(s.clone().check(p, now + d, cost).allowed);
                    prop_assert!(!s.clone().check(p, now + d - 1, cost).allowed);
                }
            }
        }

        // A request of cost `remaining` fits right now, one of `remaining + 1` does not.
        let left = decision.remaining;
        if left > 0 {
            prop_assert!(state.clone().check(p, now, left).allowed);
        }
        prop_assert!(!state.clone().check(p, now, left + 1).allowed);

        // The quota is whole `reset_after` from now, when the state expires.
        let expires = state.expires_at(p);
        let reset = micros(decision.reset_after);
        prop_assert_eq!(now + reset, expires.max(now));
        // Then a request of cost 1 leaves `capacity - 1`.
        let whole = state.clone().check(p, now + reset, 1);
        prop_assert!(whole.allowed);
        prop_assert_eq!(whole.remaining + 1, capacity);

        // From `expires_at` on the state decides like a new one, and becomes one.
        let gap = now.abs_diff(before_step);
        for at in [expires, expires + 1, expires + gap, expires + 977] {
            let at = at.max(now);
            for c in [1, cost, capacity] {
                let (mut old, mut new) = (state.clone(), fresh.clone());
                let decision = old.check(p, at, c);
                prop_assert_eq!(decision, new.check(p, at, c));
                if decision.allowed {
                    prop_assert_eq!(old, new);
                }
            }
        }
    }
    Ok(())
}

/// One property test per algorithm, so each gets its own cases and its own name.
macro_rules! promises_hold_for {
    ($($name:ident: $algorithm:expr,)*) => {
        mod promises_hold_for {
            use super::*;

            pub(super) const ALGORITHMS: &[Algorithm] = &[$($algorithm),*];

            proptest! {
                #![proptest_config(ProptestConfig::with_cases(CASES))]
                $(
                    #[test]
                    fn $name(
                        p in params($algorithm),
                        start in start(),
                        forget in any::<bool>(),
                        steps in history(true),
                    ) {
                        promises_hold($algorithm, &p, start, forget, &steps)?;
                    }
                )*
            }
        }
    };
}

promises_hold_for! {
    gcra: Algorithm::Gcra,
    token_bucket: Algorithm::TokenBucket,
    leaky_bucket: Algorithm::LeakyBucket,
    fixed_window: Algorithm::FixedWindow,
    fixed_window_from_first: Algorithm::FixedWindowFromFirst,
    sliding_window_log: Algorithm::SlidingWindowLog,
    sliding_window: Algorithm::SlidingWindow,
}

#[test]
fn every_algorithm_is_checked() {
    assert_eq!(promises_hold_for::ALGORITHMS, Algorithm::ALL);
}

/// Remaining after one more request of cost 1 at `now`, on a copy.
fn left_after_one(state: &State, p: &Params, now: u64) -> u64 {
    state.clone().check(p, now, 1).remaining
}

#[test]
fn a_refund_gives_back_what_the_algorithm_allows() {
    const S: u64 = 1_000_000;
    for algorithm in Algorithm::ALL {
        // 5 per 10 s: T = 2 s for the buckets.
        let p = *Policy::new(
            "p",
            Quota::new(5, Duration::from_secs(10)).unwrap(),
            algorithm,
        )
        .unwrap()
        .params();
        let mut state = State::new(algorithm);
        for _ in 0..3 {
            assert!(state.check(&p, S, 1).allowed, "{algorithm}");
        }
        state.refund(&p, S, 2);
        // One counted: a request now leaves 3.
        assert_eq!(left_after_one(&state, &p, S), 3, "{algorithm}");
        // More than was used gives back a whole quota, no more.
        state.refund(&p, S, 10);
        assert_eq!(left_after_one(&state, &p, S), 4, "{algorithm}");
        assert!(state.expires_at(&p) <= S, "{algorithm}");
    }
}

/// `limit` per minute under `algorithm`, with a burst of `limit` for the buckets.
fn per_minute(algorithm: Algorithm, limit: u32) -> Params {
    *Policy::new("p", Quota::per_minute(limit).unwrap(), algorithm)
        .unwrap()
        .params()
}

/// The sequences, as the reference counts them: every hit is added to the
/// counter, refused or not (envoyproxy/ratelimit `src/redis/fixed_cache_impl.go` line 36,
/// `INCRBY key hitsAddend`, whatever the answer), and a descriptor is over once the
/// counter after the hits is past the limit (`src/limiter/base_limiter.go` line 104,
/// `limitAfterIncrease > overLimitThreshold`), a look (`hits_addend` 0) included.
#[test]
fn charged_hits_close_the_budget_in_every_algorithm() {
    // A minute-aligned instant, inside one window of every kind.
    const AT: u64 = 1_700_000_040_000_000;
    for algorithm in Algorithm::ALL {
        let p = per_minute(algorithm, 10);
        let mut s = State::new(algorithm);
        assert!(s.charge(&p, AT, 8).allowed, "{algorithm}: 8 of 10");
        assert!(!s.charge(&p, AT, 5).allowed, "{algorithm}: 13 > 10");
        assert!(!s.look(&p, AT).allowed, "{algorithm}: a look at 13 of 10");
        assert!(!s.charge(&p, AT, 1).allowed, "{algorithm}: 14 > 10");
        // Without charging, the refused 5 were never counted: 8 + 1 fits.
        let mut free = State::new(algorithm);
        assert!(free.check(&p, AT, 8).allowed);
        assert!(!free.check(&p, AT, 5).allowed);
        assert!(free.look(&p, AT).allowed, "{algorithm}: a look at 8 of 10");
        assert!(free.check(&p, AT, 1).allowed, "{algorithm}: 9 of 10");

        let p = per_minute(algorithm, 1000);
        let mut s = State::new(algorithm);
        assert!(s.charge(&p, AT, 600).allowed, "{algorithm}");
        assert!(!s.charge(&p, AT, 600).allowed, "{algorithm}: 1200 > 1000");
        let look = s.look(&p, AT);
        assert!(!look.allowed, "{algorithm}: a look at 1200 of 1000");
        assert_eq!(look.remaining, 0, "{algorithm}");
    }
}

#[test]
fn a_look_is_over_only_past_the_limit() {
    const AT: u64 = 1_700_000_040_000_000;
    for algorithm in Algorithm::ALL {
        let p = per_minute(algorithm, 10);
        let mut s = State::new(algorithm);
        assert_eq!(s.look(&p, AT).remaining, 10, "{algorithm}");
        assert!(s.charge(&p, AT, 10).allowed);
        // At the limit: not over, nothing left (the reference: 10 > 10 is false).
        let look = s.look(&p, AT);
        assert!(look.allowed, "{algorithm}");
        assert_eq!(look.remaining, 0, "{algorithm}");
        assert!(!s.charge(&p, AT, 1).allowed);
        assert!(!s.look(&p, AT).allowed, "{algorithm}: 11 > 10");
    }
}

/// A flood charged while over keeps the state bounded: at most one more quota of debt,
/// so the key is whole again within two quotas' time of its last request.
#[test]
fn a_flood_charged_while_over_stays_bounded() {
    const AT: u64 = 1_700_000_040_000_000;
    const MINUTE: u64 = 60_000_000;
    for algorithm in Algorithm::ALL {
        let p = per_minute(algorithm, 10);
        let mut s = State::new(algorithm);
        for i in 0..10_000 {
            s.charge(&p, AT + i, 1 + i % 7);
        }
        let last = AT + 9_999;
        assert!(s.expires_at(&p) <= last + 2 * MINUTE, "{algorithm}");
        if let State::SlidingWindowLog(log) = &s {
            assert!(log.count() <= 20, "{algorithm}: {}", log.count());
        }
        // Two quotas' time later, whole again.
        let whole = s.clone().check(&p, last + 2 * MINUTE, 1);
        assert_eq!((whole.allowed, whole.remaining), (true, 9), "{algorithm}");
    }
}

#[test]
fn a_refund_reaches_neither_past_windows_nor_before_now() {
    const S: u64 = 1_000_000;
    let p = |algorithm| {
        *Policy::new(
            "p",
            Quota::new(5, Duration::from_secs(10)).unwrap(),
            algorithm,
        )
        .unwrap()
        .params()
    };
    // The sliding window counter: 3 in the window [0, 10 s); at 11 s they weigh 2.7, and a
    // refund lowers only the current window's count, which is 0.
    let sw = p(Algorithm::SlidingWindow);
    let mut state = State::new(Algorithm::SlidingWindow);
    for _ in 0..3 {
        state.check(&sw, S, 1);
    }
    state.refund(&sw, 11 * S, 2);
    assert_eq!(left_after_one(&state, &sw, 11 * S), 1);
    // GCRA: one request at 1 s (TAT 3 s); at 2.5 s a refund of 5 moves the TAT to now,
    // not 10 s back.
    let gcra = p(Algorithm::Gcra);
    let mut state = State::new(Algorithm::Gcra);
    state.check(&gcra, S, 1);
    state.refund(&gcra, 2_500_000, 5);
    assert_eq!(state.expires_at(&gcra), 2_500_000);
    // The log: three requests at 1, 2 and 3 s; a refund of 2 takes the newest two.
    let swl = p(Algorithm::SlidingWindowLog);
    let mut state = State::new(Algorithm::SlidingWindowLog);
    for at in [S, 2 * S, 3 * S] {
        state.check(&swl, at, 1);
    }
    state.refund(&swl, 3 * S, 2);
    assert_eq!(state.expires_at(&swl), 11 * S);
    assert_eq!(left_after_one(&state, &swl, 3 * S), 3);
}

/// Params of a bucket algorithm whose numbers stay where `f64` is exact in a conversion
/// (periods up to a second): what `used_units_survive_a_change_of_quota` draws from.
fn bucket_params(algorithm: Algorithm) -> impl Strategy<Value = Params> {
    (1u32..=50, 50u64..=1_000_000, 1u32..=50).prop_map(move |(limit, period, burst)| {
        let limit = limit.min(u32::try_from(period).unwrap_or(u32::MAX));
        let quota = Quota::new(limit, Duration::from_micros(period))
            .and_then(|q| q.burst(burst))
            .unwrap();
        *Policy::new("p", quota, algorithm).unwrap().params()
    })
}

/// Units used at `now`, rounded up: the capacity less what a look leaves.
fn used(state: &State, p: &Params, now: u64) -> u64 {
    p.burst - state.look(p, now).remaining
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// A bucket read under another quota (a client's changed) counts at least the units it
    /// used against the new one (all of the new one when it used more), and read back under
    /// the old quota gives none back (but what two buckets of the new one could not carry).
    #[test]
    fn used_units_survive_a_change_of_quota(
        (algorithm, old, mut new) in prop::sample::select(vec![
            Algorithm::Gcra,
            Algorithm::TokenBucket,
            Algorithm::LeakyBucket,
        ])
        .prop_flat_map(|a| (Just(a), bucket_params(a), bucket_params(a))),
        start in 0u64..1 << 40,
        steps in history(false),
    ) {
        new.home = old.scale();
        let mut state = State::new(algorithm);
        let mut now = start;
        for step in &steps {
            now = step.next(now, &old, algorithm);
            state.check(&old, now, step.cost(&old));
        }
        let before = used(&state, &old, now);
        let mut moved = state.clone();
        moved.rescale(old.scale(), &new, now);
        prop_assert!(used(&moved, &new, now) >= before.min(new.burst));
        // Moved back, none is given back; unless the new quota's cap (two of its buckets) cut
        // what it carried over.
        if before < new.burst {
            let mut back = moved.clone();
            back.rescale(new.scale(), &old, now);
            prop_assert!(used(&back, &old, now) >= before);
        }
    }
}
