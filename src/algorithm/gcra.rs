//! GCRA (generic cell rate algorithm): one timestamp per key.
//!
//! The state is the theoretical arrival time `tat`: the time at which the key's bucket would be
//! empty again. A request of cost `c` moves it to `new = max(tat, now) + c·T`, and is allowed iff
//! `new − now ≤ B·T`. Everything else (remaining, reset, retry) follows from `tat − now`, so the
//! Redis script needs one `GET` and, on allow, one `SET`.
//!
//! A request whose cost is larger than the burst `B` can never be allowed: it is denied with
//! `retry_after = None`.

use super::Params;
use crate::decision::Decision;

/// One key's GCRA state.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Gcra {
    /// Theoretical arrival time in µs. Any value `≤ now` (0 for a new key) means a full bucket.
    tat: u64,
}

impl Gcra {
    /// Decides a request of `cost` at `now`; stores the new `tat` only when allowed.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        // `max(tat, now) − now`: the part of the bucket in use right now.
        let backlog = self.tat.saturating_sub(now);
        let deny = |retry_after| {
            let remaining = capacity.saturating_sub(backlog) / t;
            Decision::from_micros(false, p.burst, remaining, backlog, retry_after)
        };
        if cost > p.burst {
            return deny(None);
        }
        // `new − now`.
        let after = backlog.saturating_add(cost.saturating_mul(t));
        if after > capacity {
            // At `now + d` the backlog has shrunk by `d` (it is larger than `d`, since `c ≤ B`),
            // so `d = after − capacity` is the first delay that fits.
            return deny(Some(after - capacity));
        }
        self.tat = now.saturating_add(after);
        Decision::from_micros(true, p.burst, (capacity - after) / t, after, None)
    }

    /// The bucket is full again, and the key decides like a new one, from `tat` on.
    pub(crate) fn expires_at(&self, _p: &Params) -> u64 {
        self.tat
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::super::tests::{history, params, start};
    use super::super::{leaky_bucket::LeakyBucket, token_bucket::TokenBucket};
    use super::*;
    use crate::{store::MemoryStore, Algorithm, ManualClock, Policy, Quota};

    const T0: u64 = 1_700_000_000_000_000;

    fn setup(quota: Quota) -> (MemoryStore, ManualClock, Policy) {
        let clock = ManualClock::new(T0);
        let store = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new("gcra", quota, Algorithm::Gcra).unwrap();
        (store, clock, policy)
    }

    /// `(allowed, remaining, reset_after µs, retry_after µs)`.
    fn check(store: &MemoryStore, policy: &Policy, cost: u32) -> (bool, u64, u64, Option<u64>) {
        let d = store.check_now("k", policy, cost);
        assert_eq!(d.limit, policy.params().burst);
        (
            d.allowed,
            d.remaining,
            d.reset_after.as_micros() as u64,
            d.retry_after.map(|r| r.as_micros() as u64),
        )
    }

    #[test]
    fn burst_then_deny_then_refill_after_exactly_t() {
        // 5 per 500 ms: T = 100 ms.
        let (store, clock, policy) = setup(Quota::new(5, Duration::from_millis(500)));
        for i in 1..=5u64 {
            assert_eq!(check(&store, &policy, 1), (true, 5 - i, i * 100_000, None));
        }
        assert_eq!(
            check(&store, &policy, 1),
            (false, 0, 500_000, Some(100_000))
        );
        clock.advance(Duration::from_micros(99_999));
        assert_eq!(check(&store, &policy, 1), (false, 0, 400_001, Some(1)));
        clock.advance(Duration::from_micros(1));
        assert_eq!(check(&store, &policy, 1), (true, 0, 500_000, None));
        assert_eq!(
            check(&store, &policy, 1),
            (false, 0, 500_000, Some(100_000))
        );
    }

    #[test]
    fn cost_above_one() {
        let (store, clock, policy) = setup(Quota::new(5, Duration::from_millis(500)));
        assert_eq!(check(&store, &policy, 3), (true, 2, 300_000, None));
        // 2 left: cost 3 waits for one more interval.
        assert_eq!(
            check(&store, &policy, 3),
            (false, 2, 300_000, Some(100_000))
        );
        clock.advance(Duration::from_millis(100));
        assert_eq!(check(&store, &policy, 3), (true, 0, 500_000, None));
        assert_eq!(
            check(&store, &policy, 2),
            (false, 0, 500_000, Some(200_000))
        );
    }

    #[test]
    fn cost_above_burst_is_never_allowed_and_changes_nothing() {
        let (store, _clock, policy) = setup(Quota::new(5, Duration::from_millis(500)));
        assert_eq!(check(&store, &policy, 6), (false, 5, 0, None));
        assert!(store.is_empty());
        assert_eq!(check(&store, &policy, 2), (true, 3, 200_000, None));
        assert_eq!(check(&store, &policy, 6), (false, 3, 200_000, None));
        assert_eq!(check(&store, &policy, 1), (true, 2, 300_000, None));
    }

    #[test]
    fn ten_per_second_burst_twenty() {
        // T = 100 ms, B·T = 2 s.
        let (store, clock, policy) = setup(Quota::per_second(10).burst(20));
        for i in 1..=20u64 {
            assert_eq!(check(&store, &policy, 1), (true, 20 - i, i * 100_000, None));
        }
        assert_eq!(
            check(&store, &policy, 1),
            (false, 0, 2_000_000, Some(100_000))
        );
        // One second later ten have come back.
        clock.advance(Duration::from_secs(1));
        assert_eq!(check(&store, &policy, 1), (true, 9, 1_100_000, None));
        assert_eq!(
            check(&store, &policy, 10),
            (false, 9, 1_100_000, Some(100_000))
        );
        assert_eq!(check(&store, &policy, 9), (true, 0, 2_000_000, None));
        // After two idle seconds the key is forgotten and starts whole.
        clock.advance(Duration::from_secs(2));
        assert_eq!(check(&store, &policy, 1), (true, 19, 100_000, None));
    }

    #[test]
    fn sub_millisecond_periods() {
        // 1 per 50 µs.
        let (store, clock, policy) = setup(Quota::new(1, Duration::from_micros(50)));
        assert_eq!(check(&store, &policy, 1), (true, 0, 50, None));
        assert_eq!(check(&store, &policy, 1), (false, 0, 50, Some(50)));
        clock.advance(Duration::from_micros(49));
        assert_eq!(check(&store, &policy, 1), (false, 0, 1, Some(1)));
        clock.advance(Duration::from_micros(1));
        assert_eq!(check(&store, &policy, 1), (true, 0, 50, None));

        // 5 per 100 µs: T = 20 µs.
        let (store, clock, policy) = setup(Quota::new(5, Duration::from_micros(100)));
        for i in 1..=5u64 {
            assert_eq!(check(&store, &policy, 1), (true, 5 - i, i * 20, None));
        }
        assert_eq!(check(&store, &policy, 1), (false, 0, 100, Some(20)));
        clock.advance(Duration::from_micros(45));
        assert_eq!(check(&store, &policy, 2), (true, 0, 95, None));
    }

    #[test]
    fn interval_is_rounded_up() {
        // 3 per 100 µs: T = 34 µs, never more than 3 per 100 µs once the burst is spent.
        let p = Params::new(&Quota::new(3, Duration::from_micros(100)), Algorithm::Gcra);
        assert_eq!(p.interval, 34);
        let mut s = Gcra::default();
        for _ in 0..3 {
            assert!(s.check(&p, 1_000, 1).allowed);
        }
        assert_eq!(
            s.check(&p, 1_000, 1).retry_after,
            Some(Duration::from_micros(34))
        );
    }

    #[test]
    fn clock_going_back_and_extreme_times_never_panic() {
        let p = Params::new(&Quota::per_second(10).burst(20), Algorithm::Gcra);
        let mut s = Gcra::default();
        for now in [
            0,
            5,
            0,
            u64::MAX - 1,
            u64::MAX,
            0,
            1 << 53,
            (1 << 53) - 1,
            3,
        ] {
            for cost in [0, 1, 7, 20, 21, u64::MAX] {
                let d = s.check(&p, now, cost);
                assert!(d.remaining <= 20);
            }
            let _ = s.expires_at(&p);
        }
        let huge = Params {
            limit: 1,
            period: u64::MAX,
            burst: u64::MAX,
            interval: u64::MAX,
        };
        let mut s = Gcra::default();
        for now in [0, u64::MAX, 1] {
            let _ = s.check(&huge, now, u64::MAX);
            let _ = s.check(&huge, now, 1);
        }
    }

    /// The three bucket algorithms side by side.
    #[derive(Debug, Clone, Default)]
    struct Buckets {
        gcra: Gcra,
        token: TokenBucket,
        leaky: LeakyBucket,
    }

    proptest! {
        #[test]
        fn the_three_buckets_decide_alike(
            p in params(Algorithm::Gcra),
            start in start(),
            steps in history(false),
        ) {
            let mut b = Buckets::default();
            let mut now = start;
            for step in steps {
                now = step.next(now, &p, Algorithm::Gcra);
                let cost = step.cost(&p);
                let g = b.gcra.check(&p, now, cost);
                prop_assert_eq!(b.token.check(&p, now, cost), g);
                prop_assert_eq!(b.leaky.check(&p, now, cost), g);
                prop_assert_eq!(b.token.expires_at(&p), b.gcra.expires_at(&p));
                prop_assert_eq!(b.leaky.expires_at(&p), b.gcra.expires_at(&p));
            }
        }
    }

    #[test]
    fn the_three_buckets_decide_alike_through_the_store() {
        // A seeded walk through the memory store, which also forgets expired keys.
        let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for quota in [
            Quota::per_second(10).burst(20),
            Quota::new(1, Duration::from_micros(50)),
            Quota::new(5, Duration::from_micros(100)),
            Quota::new(7, Duration::from_millis(3)).burst(3),
        ] {
            let clock = ManualClock::new(T0);
            let store = MemoryStore::with_clock(clock.clone());
            let policies = [
                Algorithm::Gcra,
                Algorithm::TokenBucket,
                Algorithm::LeakyBucket,
            ]
            .map(|a| Policy::new(a.as_str(), quota, a).unwrap());
            let t = policies[0].params().interval;
            let burst = policies[0].params().burst as u32;
            for _ in 0..5_000 {
                clock.advance(Duration::from_micros(next(t * 3)));
                let cost = 1 + next(u64::from(burst) + 1) as u32;
                let [g, tb, lb] = policies.each_ref().map(|p| store.check_now("k", p, cost));
                assert_eq!(g, tb);
                assert_eq!(g, lb);
            }
        }
    }
}
