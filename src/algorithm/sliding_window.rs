//! Sliding window counter: two epoch-aligned window counters weighted into a sliding estimate.
//!
//! With `elapsed = now − start` of the current window, `curr` its count and `prev` the count of
//! the window just before it, the estimate is `prev · (P − elapsed) / P + curr`: the previous
//! window is assumed to have been uniform, and only the part of it still inside
//! `(now − P, now]` counts. A request of cost `c` is allowed iff `estimate + c ≤ L`. Three
//! numbers per key, no boundary burst, and an estimate instead of an exact count.
//!
//! The estimate is computed in `f64` as `prev * ((P − elapsed) / P) + curr`, with the same
//! operations in the same order as `store/redis/lua/sliding_window.lua`, so both give bit-identical
//! results; the weight form keeps the estimate monotone in time, which makes `retry_after`
//! exact. Only the integers `(start, prev, curr)` are stored. A request whose cost is larger than
//! `L` can never be allowed: it is denied with `retry_after = None`.

use super::Params;
use crate::decision::Decision;

/// One key's state. `Default` (both counts 0) is a key with no history.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SlidingWindow {
    /// Start (µs) of the window `curr` belongs to.
    pub(super) start: u64,
    /// Cost allowed in the window before `start`.
    pub(super) prev: u64,
    /// Cost allowed in the window from `start`.
    pub(super) curr: u64,
}

/// The state as seen at some time: its window, the two counts that apply there, and how far
/// into the window that time is.
#[derive(Debug, Clone, Copy)]
struct View {
    start: u64,
    prev: u64,
    curr: u64,
    elapsed: u64,
}

impl View {
    /// The sliding estimate with `curr` as the current count.
    fn estimate(&self, period: u64, curr: u64) -> f64 {
        let weight = period.saturating_sub(self.elapsed) as f64 / period as f64;
        self.prev as f64 * weight + curr as f64
    }
}

/// The admission test, shared by `check` and the `retry_after` search so they cannot disagree.
fn fits(estimate: f64, cost: u64, limit: u64) -> bool {
    estimate + cost as f64 <= limit as f64
}

/// `floor(L − estimate)`, at least 0.
fn remaining(limit: u64, estimate: f64) -> u64 {
    let left = (limit as f64 - estimate).floor();
    if left > 0.0 {
        left as u64
    } else {
        0
    }
}

impl SlidingWindow {
    /// Decides a request of `cost` at `now`; stores the new counts only when allowed.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let period = p.period.max(1);
        let v = self.view(period, now);
        if fits(v.estimate(period, v.curr), cost, p.limit) {
            let curr = v.curr.saturating_add(cost);
            *self = SlidingWindow {
                start: v.start,
                prev: v.prev,
                curr,
            };
            return Decision::from_micros(
                true,
                p.burst,
                remaining(p.limit, v.estimate(period, curr)),
                reset_at(period, &v, curr).saturating_sub(now),
                None,
            );
        }
        let retry_after =
            (cost <= p.limit).then(|| self.retry_at(p, period, now, cost).saturating_sub(now));
        Decision::from_micros(
            false,
            p.burst,
            remaining(p.limit, v.estimate(period, v.curr)),
            reset_at(period, &v, v.curr).saturating_sub(now),
            retry_after,
        )
    }

    /// Records a denied request of `cost` at `now` (charged while over): the current
    /// window's count goes past the limit, to at most `2·L` (a count already above stays).
    pub(crate) fn record(&mut self, p: &Params, now: u64, cost: u64) {
        let v = self.view(p.period.max(1), now);
        let most = p.limit.saturating_mul(2).max(v.curr);
        *self = SlidingWindow {
            start: v.start,
            prev: v.prev,
            curr: v.curr.saturating_add(cost).min(most),
        };
    }

    /// Both counts stop counting one window after the last one they belong to.
    /// Gives back `n` units of the current window (the previous one's count stays).
    pub(crate) fn refund(&mut self, p: &Params, now: u64, n: u64) {
        let period = p.period.max(1);
        if self.view(period, now).start == self.start {
            self.curr = self.curr.saturating_sub(n);
        }
    }

    pub(crate) fn expires_at(&self, p: &Params) -> u64 {
        let period = p.period.max(1);
        if self.curr > 0 {
            self.start.saturating_add(period.saturating_mul(2))
        } else if self.prev > 0 {
            self.start.saturating_add(period)
        } else {
            0
        }
    }

    /// The window holding `now` and its counts. A clock that went back (before `start`) is
    /// treated as standing at `start`.
    fn view(&self, period: u64, now: u64) -> View {
        let at = now.max(self.start);
        let start = at - at % period;
        let (prev, curr) = if start == self.start {
            (self.prev, self.curr)
        } else if start == self.start.saturating_add(period) {
            (self.curr, 0)
        } else {
            (0, 0)
        };
        View {
            start,
            prev,
            curr,
            elapsed: at - start,
        }
    }

    /// Whether a request of `cost` would be allowed at `t` with no other request meanwhile.
    fn allows(&self, p: &Params, period: u64, t: u64, cost: u64) -> bool {
        let v = self.view(period, t);
        fits(v.estimate(period, v.curr), cost, p.limit)
    }

    /// The first time a request of `cost` (≤ L), denied at `now`, is allowed.
    ///
    /// `allows` is monotone in time (the weight only shrinks, and at each window edge the
    /// estimate drops to at most the old `curr`), and true one window after the current one,
    /// where the estimate is 0. The exact-arithmetic answer is a close candidate; the `f64`
    /// test then decides: steps of 1, 2, 4… µs from the candidate and a bisection find the
    /// first time it passes, in a handful of evaluations. Rounding can shift that time a long
    /// way from the candidate when `P` is long and `L` large, which is why the steps grow.
    fn retry_at(&self, p: &Params, period: u64, now: u64, cost: u64) -> u64 {
        let v = self.view(period, now);
        let denied = v.start + v.elapsed;
        let allowed = v.start.saturating_add(period.saturating_mul(2));
        // The smallest `e` in a window with `n·(P − e) ≤ room·P`, for a count `n` that decays.
        let decay_until = |room: u64, n: u64| -> u64 {
            if n == 0 {
                return 0;
            }
            let kept = u128::from(room) * u128::from(period) / u128::from(n);
            period - u64::try_from(kept).unwrap_or(u64::MAX).min(period)
        };
        let candidate = if v.curr.saturating_add(cost) <= p.limit {
            // Passes in this window once `prev` has decayed enough (or at the next window).
            v.start.saturating_add(decay_until(
                p.limit.saturating_sub(v.curr).saturating_sub(cost),
                v.prev,
            ))
        } else {
            // `curr` must decay as next window's `prev`.
            v.start
                .saturating_add(period)
                .saturating_add(decay_until(p.limit.saturating_sub(cost), v.curr))
        };
        let allows = |t: u64| self.allows(p, period, t, cost);
        // Invariant: denied at `no`, allowed at `yes`, `no < yes`.
        let (mut no, mut yes) = (denied, allowed);
        let candidate = candidate.max(no.saturating_add(1)).min(yes);
        let mut step = 1u64;
        if allows(candidate) {
            yes = candidate;
            while yes - no > step {
                let probe = yes - step;
                if !allows(probe) {
                    no = probe;
                    break;
                }
                yes = probe;
                step = step.saturating_mul(2);
            }
        } else {
            no = candidate;
            while yes - no > step {
                let probe = no + step;
                if allows(probe) {
                    yes = probe;
                    break;
                }
                no = probe;
                step = step.saturating_mul(2);
            }
        }
        while yes - no > 1 {
            let mid = no + (yes - no) / 2;
            if allows(mid) {
                yes = mid;
            } else {
                no = mid;
            }
        }
        yes
    }
}

/// When the estimate reaches 0: `curr` counts until the end of the next window, a lone `prev`
/// until the end of this one.
fn reset_at(period: u64, v: &View, curr: u64) -> u64 {
    if curr > 0 {
        v.start.saturating_add(period.saturating_mul(2))
    } else if v.prev > 0 {
        v.start.saturating_add(period)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::support::{d, setup, ALIGNED};
    use super::*;
    use crate::algorithm::{Algorithm, Scale};
    use crate::quota::Quota;

    const T0: u64 = ALIGNED;

    #[test]
    fn the_previous_window_counts_by_its_remaining_share() {
        let (store, clock, policy) =
            setup(Algorithm::SlidingWindow, T0, Quota::per_second(10).unwrap());
        clock.set(T0 + 200_000);
        assert_eq!(
            store.check_now("k", &policy, 6),
            d(10, true, 4, 1_800_000, None)
        );
        // A quarter into the next window: 6 · 0.75 = 4.5 counts.
        clock.set(T0 + 1_250_000);
        assert_eq!(
            store.check_now("k", &policy, 5),
            d(10, true, 0, 1_750_000, None)
        );
        // 6·w + 5 + 1 ≤ 10 once w ≤ 2/3: a third into the window, at T0 + 1_333_334.
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(10, false, 0, 1_750_000, Some(83_334))
        );
        clock.set(T0 + 1_333_333);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(10, false, 0, 1_666_667, Some(1))
        );
        // 5 + 6 > 10 in this window; next window 5·w + 6 ≤ 10 once w ≤ 0.8.
        assert_eq!(
            store.check_now("k", &policy, 6),
            d(10, false, 0, 1_666_667, Some(866_667))
        );
        assert_eq!(
            store.check_now("k", &policy, 11),
            d(10, false, 0, 1_666_667, None)
        );
        clock.set(T0 + 1_900_000);
        // 6 · 0.1 + 5 = 5.6, then 6.6 after this request: 3 more fit.
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(10, true, 3, 1_100_000, None)
        );
        clock.set(T0 + 2_200_000);
        assert_eq!(
            store.check_now("k", &policy, 6),
            d(10, false, 5, 800_000, Some(133_334))
        );
        // The key decides like a new one two windows after its last request.
        assert_eq!(
            store.check_now("new", &policy, 11),
            d(10, false, 10, 0, None)
        );
        clock.set(T0 + 3_000_000);
        assert_eq!(
            store.check_now("k", &policy, 10),
            d(10, true, 0, 2_000_000, None)
        );
    }

    #[test]
    fn the_window_edge() {
        let (store, clock, policy) = setup(
            Algorithm::SlidingWindow,
            T0,
            Quota::new(2, Duration::from_micros(100)).unwrap(),
        );
        clock.set(T0 + 50);
        assert_eq!(store.check_now("k", &policy, 2), d(2, true, 0, 150, None));
        // 2 + 1 > 2 in this window; next window 2·w + 1 ≤ 2 once w ≤ 0.5.
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(2, false, 0, 150, Some(100))
        );
        clock.set(T0 + 99);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(2, false, 0, 101, Some(51))
        );
        clock.set(T0 + 100);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(2, false, 0, 100, Some(50))
        );
        clock.set(T0 + 150);
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 0, 150, None));
        // 2 · 0.25 + 1 + 1 > 2; passes at the next window, where the estimate is 1.
        clock.set(T0 + 175);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(2, false, 0, 125, Some(25))
        );
        clock.set(T0 + 200);
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 0, 200, None));
    }

    #[test]
    fn fills_the_limit_in_one_window() {
        let (store, clock, policy) = setup(
            Algorithm::SlidingWindow,
            T0,
            Quota::new(5, Duration::from_micros(100)).unwrap(),
        );
        clock.set(T0 + 10);
        for left in (0..5).rev() {
            assert_eq!(
                store.check_now("k", &policy, 1),
                d(5, true, left, 190, None)
            );
        }
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(5, false, 0, 190, Some(110))
        );
        assert_eq!(store.check_now("k", &policy, 6), d(5, false, 0, 190, None));
    }

    #[test]
    fn retry_is_exact_where_rounding_spreads_the_threshold() {
        // A year-long period and a large limit: f64 cannot resolve 1 µs of decay, so the first
        // passing time is far from the exact-arithmetic candidate.
        let p = Params {
            limit: 4_000_000_000,
            period: 365 * 86_400_000_000,
            burst: 4_000_000_000,
            interval: 7_884,
            home: Scale {
                interval: 7_884,
                burst: 4_000_000_000,
            },
        };
        let start = 1_699_920_000_000_000 / p.period * p.period;
        let mut state = SlidingWindow::default();
        assert!(state.check(&p, start + 5, 3).allowed);
        assert!(state.check(&p, start + p.period + 7, 3_999_999_996).allowed);
        let now = start + p.period + 9;
        let decision = state.check(&p, now, 2);
        assert!(!decision.allowed);
        let retry = u64::try_from(decision.retry_after.unwrap().as_micros()).unwrap();
        assert!(state.clone().check(&p, now + retry, 2).allowed);
        assert!(!state.clone().check(&p, now + retry - 1, 2).allowed);
    }
}
