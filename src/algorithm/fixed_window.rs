//! Fixed window: at most `L` per window, windows aligned to the Unix epoch.
//!
//! The window holding `now` is `[k·P, (k+1)·P)` with `k = floor(now / P)`; a request of cost
//! `c` is allowed iff the window's count plus `c` stays within `L`. Two numbers per key, and
//! every key's quota comes back at the same instant.
//!
//! The price of aligned windows: a client can make `L` requests at the end of one window and
//! `L` more right after the boundary, `2·L` in a moment. A request whose cost is larger than `L`
//! can never be allowed: it is denied with `retry_after = None`.

use super::Params;
use crate::decision::Decision;

/// One key's fixed-window state. `Default` (count 0) is a key with no history.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FixedWindow {
    /// Start (µs) of the window `count` belongs to.
    start: u64,
    /// Cost allowed in that window so far.
    count: u64,
}

impl FixedWindow {
    /// Decides a request of `cost` at `now`; stores the new count only when allowed.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let period = p.period.max(1);
        let aligned = now - now % period;
        // A clock that went back (into an earlier window) stays in the stored window.
        let (start, count) = if self.count > 0 && aligned <= self.start {
            (self.start, self.count)
        } else {
            (aligned, 0)
        };
        let end = start.saturating_add(period);
        if count.saturating_add(cost) <= p.limit {
            let count = count.saturating_add(cost);
            *self = FixedWindow { start, count };
            return Decision::from_micros(
                true,
                p.burst,
                p.limit - count,
                end.saturating_sub(now),
                None,
            );
        }
        // The next window starts empty, so any cost up to `L` fits at `end` and not before.
        let retry_after = (cost <= p.limit).then(|| end.saturating_sub(now));
        let reset_after = if count > 0 {
            end.saturating_sub(now)
        } else {
            0
        };
        Decision::from_micros(
            false,
            p.burst,
            p.limit.saturating_sub(count),
            reset_after,
            retry_after,
        )
    }

    /// From the end of the stored window on, the key decides like a new one.
    pub(crate) fn expires_at(&self, p: &Params) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.start.saturating_add(p.period.max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::algorithm::Algorithm;
    use crate::clock::ManualClock;
    use crate::quota::{Policy, Quota};
    use crate::store::MemoryStore;

    const T0: u64 = 1_699_920_000_000_000; // midnight UTC: a multiple of every period used here

    fn setup(quota: Quota) -> (MemoryStore, ManualClock, Policy) {
        let clock = ManualClock::new(T0);
        let store = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new("fw", quota, Algorithm::FixedWindow).unwrap();
        (store, clock, policy)
    }

    fn d(limit: u64, allowed: bool, remaining: u64, reset: u64, retry: Option<u64>) -> Decision {
        Decision::from_micros(allowed, limit, remaining, reset, retry)
    }

    #[test]
    fn fills_the_window_then_denies_until_its_end() {
        let (store, clock, policy) = setup(Quota::per_second(3));
        clock.set(T0 + 250_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 2, 750_000, None)
        );
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 1, 750_000, None)
        );
        clock.set(T0 + 400_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 0, 600_000, None)
        );
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, false, 0, 600_000, Some(600_000))
        );
        clock.set(T0 + 999_999);
        assert_eq!(store.check_now("k", &policy, 1), d(3, false, 0, 1, Some(1)));
        // The window edge: the whole quota is back at once.
        clock.set(T0 + 1_000_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 2, 1_000_000, None)
        );
    }

    #[test]
    fn allows_twice_the_limit_around_a_boundary() {
        let (store, clock, policy) = setup(Quota::per_second(5));
        clock.set(T0 + 999_999);
        for left in (0..5).rev() {
            assert_eq!(store.check_now("k", &policy, 1), d(5, true, left, 1, None));
        }
        assert!(!store.check_now("k", &policy, 1).allowed);
        clock.set(T0 + 1_000_000);
        for left in (0..5).rev() {
            assert_eq!(
                store.check_now("k", &policy, 1),
                d(5, true, left, 1_000_000, None)
            );
        }
        // Ten requests within 2 µs.
        assert!(!store.check_now("k", &policy, 1).allowed);
    }

    #[test]
    fn cost_counts_and_a_cost_above_the_limit_never_passes() {
        let (store, clock, policy) = setup(Quota::per_minute(10));
        clock.set(T0 + 60_000_000 + 1_000_000);
        assert_eq!(
            store.check_now("k", &policy, 7),
            d(10, true, 3, 59_000_000, None)
        );
        assert_eq!(
            store.check_now("k", &policy, 4),
            d(10, false, 3, 59_000_000, Some(59_000_000))
        );
        assert_eq!(
            store.check_now("k", &policy, 3),
            d(10, true, 0, 59_000_000, None)
        );
        assert_eq!(
            store.check_now("k", &policy, 11),
            d(10, false, 0, 59_000_000, None)
        );
        // On a key with no history: nothing to reset, and no state is kept.
        assert_eq!(
            store.check_now("new", &policy, 11),
            d(10, false, 10, 0, None)
        );
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn sub_millisecond_period() {
        let (store, clock, policy) = setup(Quota::new(2, Duration::from_micros(100)));
        clock.set(T0 + 30);
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 1, 70, None));
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 0, 70, None));
        clock.set(T0 + 99);
        assert_eq!(store.check_now("k", &policy, 1), d(2, false, 0, 1, Some(1)));
        clock.set(T0 + 100);
        assert_eq!(store.check_now("k", &policy, 2), d(2, true, 0, 100, None));
        clock.set(T0 + 250);
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 1, 50, None));
    }

    #[test]
    fn a_clock_that_goes_back_stays_in_the_stored_window() {
        let (store, clock, policy) = setup(Quota::new(1, Duration::from_micros(100)));
        clock.set(T0 + 150);
        assert!(store.check_now("k", &policy, 1).allowed);
        clock.set(T0 + 50);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(1, false, 0, 150, Some(150))
        );
    }

    fn params() -> impl Strategy<Value = Params> {
        (1u64..=20, 50u64..=5_000).prop_map(|(limit, period)| {
            let limit = limit.min(period);
            Params {
                limit,
                period,
                burst: limit,
                interval: period.div_ceil(limit),
            }
        })
    }

    proptest! {
        #[test]
        fn retry_after_and_expiry_are_exact(
            p in params(),
            start in 0u64..1 << 52,
            steps in prop::collection::vec((0u64..3_000, 1u64..=25), 1..60),
        ) {
            let mut state = FixedWindow::default();
            let mut now = start;
            for (dt, cost) in steps {
                now += dt;
                if now >= state.expires_at(&p) {
                    state = FixedWindow::default();
                }
                let before = state.clone();
                let decision = state.check(&p, now, cost);
                if decision.allowed {
                    prop_assert!(state.expires_at(&p) > now);
                } else {
                    prop_assert_eq!(&state, &before);
                    prop_assert_eq!(decision.retry_after.is_none(), cost > p.limit);
                    if let Some(retry) = decision.retry_after {
                        let d = u64::try_from(retry.as_micros()).unwrap();
                        prop_assert!(d >= 1);
                        prop_assert!(before.clone().check(&p, now + d, cost).allowed);
                        prop_assert!(!before.clone().check(&p, now + d - 1, cost).allowed);
                    }
                }
                let expires = state.expires_at(&p);
                for at in [expires, expires + dt] {
                    let at = at.max(now);
                    let (mut old, mut new) = (state.clone(), FixedWindow::default());
                    let decision = old.check(&p, at, cost);
                    prop_assert_eq!(decision, new.check(&p, at, cost));
                    if decision.allowed {
                        prop_assert_eq!(old, new);
                    }
                }
            }
        }
    }
}
