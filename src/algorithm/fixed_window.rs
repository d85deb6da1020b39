//! Fixed window: at most `L` per window, windows aligned to the Unix epoch.
//!
//! The window holding `now` is `[k·P, (k+1)·P)` with `k = floor(now / P)`; a request of cost
//! `c` is allowed iff the window's count plus `c` stays within `L`. Two numbers per key, and
//! every key's quota comes back at the same instant.
//!
//! The price of aligned windows: a client can make `L` requests at the end of one window and
//! `L` more right after the boundary, `2·L` in a moment. A request whose cost is larger than `L`
//! can never be allowed: it is denied with `retry_after = None`.

use super::window::Window;
use super::{Params, State};
use crate::decision::Decision;

/// The start (µs) of the window that holds `now`.
pub(crate) fn window_start(p: &Params, now: u64) -> u64 {
    now - now % p.period.max(1)
}

impl State {
    /// A fixed-window state that has counted `count` in the window opening at `start`: what a
    /// store that keeps a plain counter per window decides with.
    #[cfg(any(feature = "memcached", feature = "redis"))]
    pub(crate) fn fixed_window(start: u64, count: u64) -> Self {
        State::FixedWindow(FixedWindow(Window { start, count }))
    }
}

/// One key's fixed-window state. `Default` is a key with no history.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FixedWindow(pub(super) Window);

impl FixedWindow {
    /// Decides a request of `cost` at `now`; stores the new count only when allowed.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let aligned = window_start(p, now);
        // A clock that went back (into an earlier window) stays in the stored window.
        let current = self.0.started().is_some_and(|start| aligned <= start);
        self.0.check(p, now, cost, current, aligned)
    }

    /// Records a denied request of `cost` at `now` (charged while over): see `Window::record`.
    pub(crate) fn record(&mut self, p: &Params, now: u64, cost: u64) {
        let aligned = window_start(p, now);
        let current = self.0.started().is_some_and(|start| aligned <= start);
        self.0.record(p, cost, current, aligned);
    }

    /// From the end of the stored window on, the key decides like a new one.
    /// Gives back `n` units of the current window.
    pub(crate) fn refund(&mut self, p: &Params, now: u64, n: u64) {
        let aligned = window_start(p, now);
        let current = self.0.started().is_some_and(|start| aligned <= start);
        self.0.refund(current, n);
    }

    pub(crate) fn expires_at(&self, p: &Params) -> u64 {
        self.0.expires_at(p)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::support::{d, setup, ALIGNED};
    use crate::algorithm::Algorithm;
    use crate::quota::Quota;

    const T0: u64 = ALIGNED;

    #[test]
    fn fills_the_window_then_denies_until_its_end() {
        let (store, clock, policy) =
            setup(Algorithm::FixedWindow, T0, Quota::per_second(3).unwrap());
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
        let (store, clock, policy) =
            setup(Algorithm::FixedWindow, T0, Quota::per_second(5).unwrap());
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
        let (store, clock, policy) =
            setup(Algorithm::FixedWindow, T0, Quota::per_minute(10).unwrap());
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
        let (store, clock, policy) = setup(
            Algorithm::FixedWindow,
            T0,
            Quota::new(2, Duration::from_micros(100)).unwrap(),
        );
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
}
