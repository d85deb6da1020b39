//! Fixed window from first request: each key's window opens at its own first request.
//!
//! A key's window opens at its first request (or its first request after the previous window
//! ended) and lasts `P`; within it a request of cost `c` is allowed iff the count plus `c` stays
//! within `L`, and the whole quota comes back at once when it ends. Keys' refills are spread over
//! time instead of all landing on the same epoch-aligned instant.
//!
//! Bursts of up to `2·L − 1` in a moment are expected around a refill: one request opens a
//! window, `L − 1` come just before it ends and `L` right after. A request whose cost is larger
//! than `L` can never be allowed: it is denied with `retry_after = None`.

use super::window::Window;
use super::Params;
use crate::decision::Decision;

/// One key's state. `Default` is a key with no history.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FixedWindowFromFirst(pub(super) Window);

impl FixedWindowFromFirst {
    /// Decides a request of `cost` at `now`; stores the new window and count only when allowed.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        // The stored window lasts until `start + P`; a clock that went back (before `start`)
        // stays in it. Otherwise this request opens a new window.
        let current = self
            .0
            .started()
            .is_some_and(|start| now < start.saturating_add(p.period.max(1)));
        self.0.check(p, now, cost, current, now)
    }

    /// Records a denied request of `cost` at `now` (charged while over): see `Window::record`.
    pub(crate) fn record(&mut self, p: &Params, now: u64, cost: u64) {
        let current = self
            .0
            .started()
            .is_some_and(|start| now < start.saturating_add(p.period.max(1)));
        self.0.record(p, cost, current, now);
    }

    /// From the end of the stored window on, the key decides like a new one.
    /// Gives back `n` units of the current window.
    pub(crate) fn refund(&mut self, p: &Params, now: u64, n: u64) {
        let current = self
            .0
            .started()
            .is_some_and(|start| now < start.saturating_add(p.period.max(1)));
        self.0.refund(current, n);
    }

    pub(crate) fn expires_at(&self, p: &Params) -> u64 {
        self.0.expires_at(p)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::support::{d, setup, UNALIGNED};
    use crate::algorithm::Algorithm;
    use crate::quota::Quota;

    const T0: u64 = UNALIGNED;

    #[test]
    fn the_window_opens_at_the_first_request() {
        let (store, clock, policy) = setup(
            Algorithm::FixedWindowFromFirst,
            T0,
            Quota::per_second(3).unwrap(),
        );
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 2, 1_000_000, None)
        );
        clock.set(T0 + 300_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 1, 700_000, None)
        );
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 0, 700_000, None)
        );
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, false, 0, 700_000, Some(700_000))
        );
        // The window edge: denied 1 µs before, whole again at start + P.
        clock.set(T0 + 999_999);
        assert_eq!(store.check_now("k", &policy, 1), d(3, false, 0, 1, Some(1)));
        clock.set(T0 + 1_000_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 2, 1_000_000, None)
        );
        // The next window opens at the first request after the previous one ended.
        clock.set(T0 + 3_500_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 2, 1_000_000, None)
        );
        clock.set(T0 + 4_499_999);
        assert_eq!(store.check_now("k", &policy, 2), d(3, true, 0, 1, None));
    }

    #[test]
    fn allows_two_limits_minus_one_around_a_refill() {
        let (store, clock, policy) = setup(
            Algorithm::FixedWindowFromFirst,
            T0,
            Quota::per_second(4).unwrap(),
        );
        assert!(store.check_now("k", &policy, 1).allowed);
        clock.set(T0 + 999_999);
        for left in (0..3).rev() {
            assert_eq!(store.check_now("k", &policy, 1), d(4, true, left, 1, None));
        }
        assert!(!store.check_now("k", &policy, 1).allowed);
        clock.set(T0 + 1_000_000);
        for left in (0..4).rev() {
            assert_eq!(
                store.check_now("k", &policy, 1),
                d(4, true, left, 1_000_000, None)
            );
        }
        // 2·4 − 1 = 7 requests within 2 µs.
        assert!(!store.check_now("k", &policy, 1).allowed);
    }

    #[test]
    fn cost_counts_and_a_cost_above_the_limit_never_passes() {
        let (store, clock, policy) = setup(
            Algorithm::FixedWindowFromFirst,
            T0,
            Quota::per_minute(10).unwrap(),
        );
        assert_eq!(
            store.check_now("k", &policy, 6),
            d(10, true, 4, 60_000_000, None)
        );
        clock.set(T0 + 20_000_000);
        assert_eq!(
            store.check_now("k", &policy, 5),
            d(10, false, 4, 40_000_000, Some(40_000_000))
        );
        assert_eq!(
            store.check_now("k", &policy, 4),
            d(10, true, 0, 40_000_000, None)
        );
        assert_eq!(
            store.check_now("k", &policy, 11),
            d(10, false, 0, 40_000_000, None)
        );
        assert_eq!(
            store.check_now("new", &policy, 11),
            d(10, false, 10, 0, None)
        );
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn sub_millisecond_period() {
        let (store, clock, policy) = setup(
            Algorithm::FixedWindowFromFirst,
            T0,
            Quota::new(2, Duration::from_micros(100)).unwrap(),
        );
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 1, 100, None));
        clock.set(T0 + 60);
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 0, 40, None));
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(2, false, 0, 40, Some(40))
        );
        clock.set(T0 + 100);
        assert_eq!(store.check_now("k", &policy, 2), d(2, true, 0, 100, None));
        clock.set(T0 + 199);
        assert_eq!(store.check_now("k", &policy, 1), d(2, false, 0, 1, Some(1)));
        clock.set(T0 + 1_000);
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 1, 100, None));
    }
}
