//! Leaky bucket as a queue: one slot drains every `T`.
//!
//! A request of cost `c` takes `c` consecutive slots, the first at
//! `start = max(now, last + T)`, the last at `end = start + (c − 1)·T`, and is allowed iff
//! `end − now ≤ (B − 1)·T`, i.e. the queue holds at most `B` slots. The state is `last`, the time
//! of the last slot handed out.
//!
//! It admits exactly what [`Gcra`](super::gcra::Gcra) admits (`last + T` is GCRA's `tat`). Its
//! point is the layer's delay mode: an allowed request waits until its `start`
//! ([`LeakyBucket::delay`]) so requests leave at a steady rate, a bounded queue.
//!
//! A request whose cost is larger than the burst `B` can never be allowed: it is denied with
//! `retry_after = None`.

use std::time::Duration;

use super::Params;
use crate::decision::Decision;

/// One key's queue. `None` is a key with no history: an empty queue.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LeakyBucket {
    /// The time of the last slot handed out, µs. Redis stores it as a decimal string.
    last: Option<u64>,
}

impl LeakyBucket {
    /// Decides a request of `cost` at `now`; takes its slots only when allowed.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        // `start − now`: how long the queue ahead of a new request takes to drain.
        let backlog = self
            .last
            .map_or(0, |last| last.saturating_add(t).saturating_sub(now));
        // `(B − 1)·T`: the latest a slot may be from now.
        let last_offset = p.burst.saturating_sub(1).saturating_mul(t);
        let deny = |retry_after| {
            // As many cost-1 requests as fit: `1 + ((B − 1)·T − backlog) / T` when one fits.
            let remaining = capacity.saturating_sub(backlog) / t;
            Decision::from_micros(false, p.burst, remaining, backlog, retry_after)
        };
        if cost > p.burst {
            return deny(None);
        }
        // `end − now`.
        let end = backlog.saturating_add(cost.saturating_sub(1).saturating_mul(t));
        if end > last_offset {
            // The queue drains by `d` by `now + d` (`start` does not move before then, since
            // `c ≤ B`), so `d = end − (B − 1)·T` is the first delay that fits.
            return deny(Some(end - last_offset));
        }
        self.last = Some(now.saturating_add(end));
        let reset_after = end.saturating_add(t);
        Decision::from_micros(true, p.burst, (last_offset - end) / t, reset_after, None)
    }

    /// The queue is empty from `last + T` on, and decides like a new key.
    pub(crate) fn expires_at(&self, p: &Params) -> u64 {
        self.last
            .map_or(0, |last| last.saturating_add(p.interval.max(1)))
    }

    /// How long an allowed request of `cost` waits for its first slot (`start − now`), from its
    /// decision alone, so it works the same whatever store made it.
    ///
    /// After an allowed request `reset_after = end + T − now = start + c·T − now`. Zero for a
    /// denied decision.
    #[allow(dead_code)] // For the layer's delay mode.
    pub(crate) fn delay(p: &Params, decision: &Decision, cost: u64) -> Duration {
        if !decision.allowed {
            return Duration::ZERO;
        }
        let held = cost.max(1).saturating_mul(p.interval.max(1));
        let reset_after = u64::try_from(decision.reset_after.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(reset_after.saturating_sub(held))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::super::tests::{history, params, start};
    use super::*;
    use crate::{store::MemoryStore, Algorithm, ManualClock, Policy, Quota};

    const T0: u64 = 1_700_000_000_000_000;

    fn setup(quota: Quota) -> (MemoryStore, ManualClock, Policy) {
        let clock = ManualClock::new(T0);
        let store = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new("lb", quota, Algorithm::LeakyBucket).unwrap();
        (store, clock, policy)
    }

    /// `(allowed, remaining, reset_after µs, retry_after µs, delay µs)`.
    fn check(
        store: &MemoryStore,
        policy: &Policy,
        cost: u32,
    ) -> (bool, u64, u64, Option<u64>, u64) {
        let d = store.check_now("k", policy, cost);
        assert_eq!(d.limit, policy.params().burst);
        (
            d.allowed,
            d.remaining,
            d.reset_after.as_micros() as u64,
            d.retry_after.map(|r| r.as_micros() as u64),
            LeakyBucket::delay(policy.params(), &d, u64::from(cost)).as_micros() as u64,
        )
    }

    #[test]
    fn burst_then_deny_then_refill_after_exactly_t() {
        // 5 per 500 ms: a slot every 100 ms; the i-th request of a burst waits (i − 1)·T.
        let (store, clock, policy) = setup(Quota::new(5, Duration::from_millis(500)));
        for i in 1..=5u64 {
            let delay = (i - 1) * 100_000;
            assert_eq!(
                check(&store, &policy, 1),
                (true, 5 - i, i * 100_000, None, delay)
            );
        }
        assert_eq!(
            check(&store, &policy, 1),
            (false, 0, 500_000, Some(100_000), 0)
        );
        clock.advance(Duration::from_micros(99_999));
        assert_eq!(check(&store, &policy, 1), (false, 0, 400_001, Some(1), 0));
        clock.advance(Duration::from_micros(1));
        assert_eq!(check(&store, &policy, 1), (true, 0, 500_000, None, 400_000));
        assert_eq!(
            check(&store, &policy, 1),
            (false, 0, 500_000, Some(100_000), 0)
        );
    }

    #[test]
    fn cost_above_one_takes_consecutive_slots() {
        let (store, clock, policy) = setup(Quota::new(5, Duration::from_millis(500)));
        assert_eq!(check(&store, &policy, 3), (true, 2, 300_000, None, 0));
        assert_eq!(
            check(&store, &policy, 3),
            (false, 2, 300_000, Some(100_000), 0)
        );
        assert_eq!(check(&store, &policy, 2), (true, 0, 500_000, None, 300_000));
        clock.advance(Duration::from_millis(150));
        // Slots at +300 ms and +400 ms are still queued (150 and 250 ms from now).
        assert_eq!(
            check(&store, &policy, 2),
            (false, 1, 350_000, Some(50_000), 0)
        );
        assert_eq!(check(&store, &policy, 1), (true, 0, 450_000, None, 350_000));
    }

    #[test]
    fn cost_above_burst_is_never_allowed_and_changes_nothing() {
        let (store, _clock, policy) = setup(Quota::new(5, Duration::from_millis(500)));
        assert_eq!(check(&store, &policy, 6), (false, 5, 0, None, 0));
        assert!(store.is_empty());
        assert_eq!(check(&store, &policy, 2), (true, 3, 200_000, None, 0));
        assert_eq!(check(&store, &policy, 6), (false, 3, 200_000, None, 0));
        assert_eq!(check(&store, &policy, 1), (true, 2, 300_000, None, 200_000));
    }

    #[test]
    fn ten_per_second_burst_twenty() {
        let (store, clock, policy) = setup(Quota::per_second(10).burst(20));
        for i in 1..=20u64 {
            let delay = (i - 1) * 100_000;
            assert_eq!(
                check(&store, &policy, 1),
                (true, 20 - i, i * 100_000, None, delay)
            );
        }
        assert_eq!(
            check(&store, &policy, 1),
            (false, 0, 2_000_000, Some(100_000), 0)
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            check(&store, &policy, 1),
            (true, 9, 1_100_000, None, 1_000_000)
        );
        assert_eq!(
            check(&store, &policy, 10),
            (false, 9, 1_100_000, Some(100_000), 0)
        );
        assert_eq!(
            check(&store, &policy, 9),
            (true, 0, 2_000_000, None, 1_100_000)
        );
        clock.advance(Duration::from_secs(2));
        assert_eq!(check(&store, &policy, 1), (true, 19, 100_000, None, 0));
    }

    #[test]
    fn sub_millisecond_periods() {
        let (store, clock, policy) = setup(Quota::new(1, Duration::from_micros(50)));
        assert_eq!(check(&store, &policy, 1), (true, 0, 50, None, 0));
        assert_eq!(check(&store, &policy, 1), (false, 0, 50, Some(50), 0));
        clock.advance(Duration::from_micros(49));
        assert_eq!(check(&store, &policy, 1), (false, 0, 1, Some(1), 0));
        clock.advance(Duration::from_micros(1));
        assert_eq!(check(&store, &policy, 1), (true, 0, 50, None, 0));

        // 5 per 100 µs: a slot every 20 µs.
        let (store, clock, policy) = setup(Quota::new(5, Duration::from_micros(100)));
        for i in 1..=5u64 {
            assert_eq!(
                check(&store, &policy, 1),
                (true, 5 - i, i * 20, None, (i - 1) * 20)
            );
        }
        assert_eq!(check(&store, &policy, 1), (false, 0, 100, Some(20), 0));
        clock.advance(Duration::from_micros(45));
        assert_eq!(check(&store, &policy, 2), (true, 0, 95, None, 55));
    }

    #[test]
    fn clock_going_back_and_extreme_times_never_panic() {
        let p = Params::new(&Quota::per_second(10).burst(20), Algorithm::LeakyBucket);
        let mut s = LeakyBucket::default();
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
                let _ = LeakyBucket::delay(&p, &d, cost);
            }
            let _ = s.expires_at(&p);
        }
    }

    proptest! {
        #[test]
        fn delay_is_the_wait_for_the_first_slot(
            p in params(Algorithm::LeakyBucket),
            start in start(),
            steps in history(true),
        ) {
            let mut s = LeakyBucket::default();
            let mut now = start;
            for step in steps {
                now = step.next(now, &p, Algorithm::LeakyBucket);
                let cost = step.cost(&p);
                let before = s.clone();
                let d = s.check(&p, now, cost);
                let wait = match before.last {
                    Some(last) if d.allowed => (last + p.interval).saturating_sub(now),
                    _ => 0,
                };
                prop_assert_eq!(LeakyBucket::delay(&p, &d, cost), Duration::from_micros(wait));
            }
        }
    }
}
