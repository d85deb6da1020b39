//! Token bucket: `B` tokens, refilled continuously at `L` per `P`.
//!
//! Tokens are kept as exact integer credit in µs: one token is `T` µs of credit, a full bucket
//! `B·T`, and every elapsed µs adds one µs of credit up to the capacity. A request of cost `c`
//! is allowed iff the credit is at least `c·T`. No fractions, so the Lua script agrees exactly.
//!
//! With this exact refill it admits exactly what [`Gcra`](super::gcra::Gcra) admits, decision
//! for decision (GCRA's `tat` is the time this bucket is full again); that is expected. It is
//! offered because "token bucket" is the model many people reason in, and its state reads as
//! tokens.
//!
//! A request whose cost is larger than the burst `B` can never be allowed: it is denied with
//! `retry_after = None`.

use super::Params;
use crate::decision::Decision;

/// One key's bucket. `None` is a key with no history: a full bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TokenBucket {
    bucket: Option<Bucket>,
}

/// The credit at the last allowed request. Redis stores it as the string `"credit:updated_at"`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    /// µs of credit (`T` per token) at `updated_at`.
    credit: u64,
    /// When `credit` was computed, µs. Refill counts from here.
    updated_at: u64,
}

impl TokenBucket {
    /// Decides a request of `cost` at `now`; takes `cost·T` of credit only when allowed.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        // `pending` is how far `now` lies before `updated_at` (a clock that went back): refill
        // only starts once that time comes, so it delays both the retry and the reset.
        let (credit, pending, updated_at) = match self.bucket {
            None => (capacity, 0, now),
            Some(b) => (
                b.credit
                    .saturating_add(now.saturating_sub(b.updated_at))
                    .min(capacity),
                b.updated_at.saturating_sub(now),
                b.updated_at.max(now),
            ),
        };
        let need = cost.saturating_mul(t);
        if cost > p.burst || credit < need {
            let retry_after = (cost <= p.burst).then(|| (need - credit).saturating_add(pending));
            let reset_after = (capacity - credit).saturating_add(pending);
            return Decision::from_micros(false, p.burst, credit / t, reset_after, retry_after);
        }
        let credit = credit - need;
        self.bucket = Some(Bucket { credit, updated_at });
        let reset_after = (capacity - credit).saturating_add(pending);
        Decision::from_micros(true, p.burst, credit / t, reset_after, None)
    }

    /// The time the bucket is full again; from then on it decides like a new key.
    pub(crate) fn expires_at(&self, p: &Params) -> u64 {
        let capacity = p.burst.saturating_mul(p.interval.max(1));
        self.bucket.map_or(0, |b| {
            b.updated_at
                .saturating_add(capacity.saturating_sub(b.credit))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{store::MemoryStore, Algorithm, ManualClock, Policy, Quota};

    const T0: u64 = 1_700_000_000_000_000;

    fn setup(quota: Quota) -> (MemoryStore, ManualClock, Policy) {
        let clock = ManualClock::new(T0);
        let store = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new("tb", quota, Algorithm::TokenBucket).unwrap();
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
        // 5 per 500 ms: one token per 100 ms.
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
        assert_eq!(
            check(&store, &policy, 3),
            (false, 2, 300_000, Some(100_000))
        );
        // Half a token more is not enough.
        clock.advance(Duration::from_millis(50));
        assert_eq!(check(&store, &policy, 3), (false, 2, 250_000, Some(50_000)));
        clock.advance(Duration::from_millis(50));
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
        let (store, clock, policy) = setup(Quota::per_second(10).burst(20));
        for i in 1..=20u64 {
            assert_eq!(check(&store, &policy, 1), (true, 20 - i, i * 100_000, None));
        }
        assert_eq!(
            check(&store, &policy, 1),
            (false, 0, 2_000_000, Some(100_000))
        );
        clock.advance(Duration::from_millis(1_050));
        // 10.5 tokens: 10 whole ones.
        assert_eq!(
            check(&store, &policy, 11),
            (false, 10, 950_000, Some(50_000))
        );
        assert_eq!(check(&store, &policy, 10), (true, 0, 1_950_000, None));
        clock.advance(Duration::from_secs(5));
        assert_eq!(check(&store, &policy, 20), (true, 0, 2_000_000, None));
    }

    #[test]
    fn sub_millisecond_periods() {
        let (store, clock, policy) = setup(Quota::new(1, Duration::from_micros(50)));
        assert_eq!(check(&store, &policy, 1), (true, 0, 50, None));
        assert_eq!(check(&store, &policy, 1), (false, 0, 50, Some(50)));
        clock.advance(Duration::from_micros(49));
        assert_eq!(check(&store, &policy, 1), (false, 0, 1, Some(1)));
        clock.advance(Duration::from_micros(1));
        assert_eq!(check(&store, &policy, 1), (true, 0, 50, None));

        // 5 per 100 µs: a token per 20 µs.
        let (store, clock, policy) = setup(Quota::new(5, Duration::from_micros(100)));
        for i in 1..=5u64 {
            assert_eq!(check(&store, &policy, 1), (true, 5 - i, i * 20, None));
        }
        assert_eq!(check(&store, &policy, 1), (false, 0, 100, Some(20)));
        clock.advance(Duration::from_micros(45));
        assert_eq!(check(&store, &policy, 2), (true, 0, 95, None));
    }

    #[test]
    fn clock_going_back_delays_refill_and_never_panics() {
        let p = Params::new(
            &Quota::new(5, Duration::from_micros(500)),
            Algorithm::TokenBucket,
        );
        let mut s = TokenBucket::default();
        assert!(s.check(&p, 1_000, 5).allowed);
        // 100 µs earlier: still empty, and refill only starts at 1_000.
        let d = s.check(&p, 900, 1);
        assert_eq!(d.retry_after, Some(Duration::from_micros(200)));
        assert_eq!(d.reset_after, Duration::from_micros(600));
        assert!(!s.clone().check(&p, 1_099, 1).allowed);
        assert!(s.check(&p, 1_100, 1).allowed);
        for now in [0, u64::MAX, 0, 1 << 53, 7] {
            for cost in [0, 1, 5, 6, u64::MAX] {
                assert!(s.check(&p, now, cost).remaining <= 5);
            }
            let _ = s.expires_at(&p);
        }
    }
}
