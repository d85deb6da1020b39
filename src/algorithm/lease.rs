//! Leases: many units of quota taken at once, and unused ones given back, exactly.
//!
//! `store/redis/lua/lease.lua` must agree with this file decision for decision.
//!
//! - Buckets (GCRA, leaky bucket, token bucket): a lease of up to `max` units admits as many as
//!   the algorithm admits back to back at that instant, `g ≤ max`, and stores the state as if
//!   `g` requests had been allowed. Its mark is `lease_end = max(tat, now) + g·T`, in the TAT's
//!   time (for the token bucket: when the bucket is full again). Giving back `u` units at
//!   `now` moves the TAT back by `min(u·T, lease_end − now)`, by nothing if that is negative,
//!   and never before `now`: units whose slots have drained were refilled by time itself, and
//!   taking them back again would erase what others consumed after them.
//! - Fixed windows: a lease takes up to `L − count` units of the current window; its mark is
//!   the window's start. Unused units are given back only while that window lasts.
//!
//! A lease that cannot get `min` units gets none, and answers as a request of cost `min`
//! would be answered (the same `retry_after`), so a denial means the same as any other.

use super::fixed_window::FixedWindow;
use super::fixed_window_from_first::FixedWindowFromFirst;
use super::gcra::Gcra;
use super::token_bucket::{Bucket, TokenBucket};
use super::window::Window;
use super::{Params, State};
use crate::decision::Decision;

/// A lease as the state machine made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Granted {
    /// Units granted, 0 when denied.
    pub(crate) granted: u64,
    /// With units: the decision of the last of them, as if `granted` requests had been
    /// allowed (`remaining` is what is left after them). Without: the denial of a request of
    /// cost `min`.
    pub(crate) decision: Decision,
    /// What a return needs to take back exactly: the lease's end (buckets) or its window's
    /// start (windows).
    pub(crate) mark: u64,
}

impl Granted {
    fn denied(decision: Decision) -> Self {
        Self {
            granted: 0,
            decision,
            mark: 0,
        }
    }
}

impl State {
    /// Leases from `min` to `max` units at `now` (both ≥ 1, `min ≤ max`): as many as fit
    /// back to back, or none (and the denial of a request of cost `min`) if fewer than `min`.
    pub(crate) fn acquire(&mut self, p: &Params, now: u64, min: u64, max: u64) -> Granted {
        let min = min.max(1);
        let max = max.max(min);
        match self {
            State::Gcra(s) | State::LeakyBucket(s) => s.acquire(p, now, min, max),
            State::TokenBucket(s) => s.acquire(p, now, min, max),
            State::FixedWindow(FixedWindow(w)) => {
                let aligned = now - now % p.period.max(1);
                let current = w.started().is_some_and(|start| aligned <= start);
                w.acquire(p, now, min, max, current, aligned)
            }
            State::FixedWindowFromFirst(FixedWindowFromFirst(w)) => {
                let current = w
                    .started()
                    .is_some_and(|start| now < start.saturating_add(p.period.max(1)));
                w.acquire(p, now, min, max, current, now)
            }
            // Policies refuse leases of the sliding windows; a store asked anyway grants `min`
            // as one request, which is exact.
            State::SlidingWindowLog(_) | State::SlidingWindow(_) => {
                let decision = self.check(p, now, min);
                Granted {
                    granted: if decision.allowed { min } else { 0 },
                    decision,
                    mark: 0,
                }
            }
        }
    }

    /// Gives back up to `unused` units of the lease marked `mark` at `now`; returns how many
    /// were taken back.
    pub(crate) fn release(&mut self, p: &Params, now: u64, unused: u64, mark: u64) -> u64 {
        match self {
            State::Gcra(s) | State::LeakyBucket(s) => s.release(p, now, unused, mark),
            State::TokenBucket(s) => s.release(p, now, unused, mark),
            State::FixedWindow(FixedWindow(w))
            | State::FixedWindowFromFirst(FixedWindowFromFirst(w)) => {
                w.release(p, now, unused, mark)
            }
            State::SlidingWindowLog(_) | State::SlidingWindow(_) => 0,
        }
    }
}

impl Gcra {
    fn acquire(&mut self, p: &Params, now: u64, min: u64, max: u64) -> Granted {
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        let backlog = self.tat.saturating_sub(now);
        let fit = capacity.saturating_sub(backlog) / t;
        let deny = |retry_after| {
            Granted::denied(Decision::from_micros(
                false,
                p.burst,
                fit,
                backlog,
                retry_after,
            ))
        };
        if min > p.burst {
            return deny(None);
        }
        let granted = max.min(fit);
        if granted < min {
            return deny(Some(backlog + min * t - capacity));
        }
        let after = backlog + granted * t;
        self.tat = now.saturating_add(after);
        Granted {
            granted,
            decision: Decision::from_micros(true, p.burst, (capacity - after) / t, after, None),
            mark: self.tat,
        }
    }

    fn release(&mut self, p: &Params, now: u64, unused: u64, lease_end: u64) -> u64 {
        let t = p.interval.max(1);
        if lease_end <= now || self.tat <= now {
            return 0;
        }
        let back = unused.saturating_mul(t).min(lease_end - now);
        let tat = self.tat.saturating_sub(back).max(now);
        let taken = (self.tat - tat) / t;
        self.tat = tat;
        taken
    }
}

impl TokenBucket {
    /// The credit at `now` after refill, how far `now` lies before the last update (a clock
    /// that went back), and the update's time: as `check` computes them.
    fn refilled(&self, capacity: u64, now: u64) -> (u64, u64, u64) {
        match self.bucket {
            None => (capacity, 0, now),
            Some(b) => (
                b.credit
                    .saturating_add(now.saturating_sub(b.updated_at))
                    .min(capacity),
                b.updated_at.saturating_sub(now),
                b.updated_at.max(now),
            ),
        }
    }

    fn acquire(&mut self, p: &Params, now: u64, min: u64, max: u64) -> Granted {
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        let (credit, pending, updated_at) = self.refilled(capacity, now);
        let granted = max.min(credit / t);
        if min > p.burst || granted < min {
            let retry_after = (min <= p.burst).then(|| min * t - credit + pending);
            let reset_after = capacity - credit + pending;
            return Granted::denied(Decision::from_micros(
                false,
                p.burst,
                credit / t,
                reset_after,
                retry_after,
            ));
        }
        let credit = credit - granted * t;
        self.bucket = Some(Bucket { credit, updated_at });
        let reset_after = capacity - credit + pending;
        Granted {
            granted,
            decision: Decision::from_micros(true, p.burst, credit / t, reset_after, None),
            // When the bucket is full again: GCRA's TAT.
            mark: now.saturating_add(reset_after),
        }
    }

    fn release(&mut self, p: &Params, now: u64, unused: u64, lease_end: u64) -> u64 {
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        if self.bucket.is_none() || lease_end <= now {
            return 0;
        }
        let (credit, _, updated_at) = self.refilled(capacity, now);
        let back = unused.saturating_mul(t).min(lease_end - now);
        let returned = credit.saturating_add(back).min(capacity);
        self.bucket = Some(Bucket {
            credit: returned,
            updated_at,
        });
        (returned - credit) / t
    }
}

impl Window {
    fn acquire(
        &mut self,
        p: &Params,
        now: u64,
        min: u64,
        max: u64,
        current: bool,
        new_start: u64,
    ) -> Granted {
        let (start, count) = if current {
            (self.start, self.count)
        } else {
            (new_start, 0)
        };
        let end = start.saturating_add(p.period.max(1));
        let fit = p.limit.saturating_sub(count);
        let granted = max.min(fit);
        if min > p.limit || granted < min {
            let retry_after = (min <= p.limit).then(|| end.saturating_sub(now));
            let reset_after = if count > 0 {
                end.saturating_sub(now)
            } else {
                0
            };
            return Granted::denied(Decision::from_micros(
                false,
                p.burst,
                fit,
                reset_after,
                retry_after,
            ));
        }
        let count = count + granted;
        *self = Window { start, count };
        Granted {
            granted,
            decision: Decision::from_micros(
                true,
                p.burst,
                p.limit - count,
                end.saturating_sub(now),
                None,
            ),
            mark: start,
        }
    }

    fn release(&mut self, p: &Params, now: u64, unused: u64, start: u64) -> u64 {
        let same_window =
            self.started() == Some(start) && now < start.saturating_add(p.period.max(1));
        if !same_window {
            return 0;
        }
        let taken = unused.min(self.count);
        self.count -= taken;
        taken
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::Algorithm;
    use crate::quota::Quota;

    /// 10 per second with a burst of 20: T = 100 ms.
    fn bucket(algorithm: Algorithm) -> Params {
        Quota::per_second(10)
            .unwrap()
            .burst(20)
            .unwrap()
            .params(algorithm)
    }

    const T: u64 = 100_000;

    #[test]
    fn a_lease_is_what_back_to_back_requests_would_get() {
        for algorithm in crate::rules::Lease::ALGORITHMS {
            let p = &Quota::per_second(10).unwrap().params(algorithm);
            let (mut leased, mut one_by_one) = (State::new(algorithm), State::new(algorithm));
            let now = 5_000_000;
            let lease = leased.acquire(p, now, 1, 4);
            let mut last = None;
            for _ in 0..4 {
                last = Some(one_by_one.check(p, now, 1));
            }
            assert_eq!(lease.granted, 4, "{algorithm}");
            assert_eq!(Some(lease.decision), last, "{algorithm}");
            assert_eq!(leased, one_by_one, "{algorithm}");
            // What is left: 6; a lease of up to 100 gets those 6.
            assert_eq!(leased.acquire(p, now, 1, 100).granted, 6, "{algorithm}");
            // And then a lease gets nothing, answered as a request of cost `min`.
            let denied = leased.acquire(p, now, 2, 100);
            assert_eq!(denied.granted, 0);
            assert_eq!(
                Some(denied.decision),
                Some(leased.clone().check(p, now, 2)),
                "{algorithm}"
            );
        }
    }

    #[test]
    fn the_design_example_a_return_never_erases_later_consumption() {
        // A lease of 10 at 0, 1 unit from elsewhere at 20T, a return of 5 at 20T: TAT = 21T.
        for algorithm in [Algorithm::Gcra, Algorithm::LeakyBucket] {
            let p = &bucket(algorithm);
            let mut state = State::new(algorithm);
            let lease = state.acquire(p, 0, 1, 10);
            assert_eq!((lease.granted, lease.mark), (10, 10 * T));
            assert!(state.check(p, 20 * T, 1).allowed);
            assert_eq!(state.release(p, 20 * T, 5, lease.mark), 0);
            assert_eq!(state, State::Gcra(Gcra { tat: 21 * T }).with(algorithm));
        }
    }

    #[test]
    fn a_return_takes_back_only_what_is_still_ahead_of_now() {
        let p = &bucket(Algorithm::Gcra);
        let mut state = State::new(Algorithm::Gcra);
        let lease = state.acquire(p, 0, 1, 10);
        // Another instance takes 1 at 0: TAT 11T.
        assert!(state.check(p, 0, 1).allowed);
        // 5 unused at 2T: the lease ends at 10T, 8T ahead, so all 5 come back: TAT 6T.
        assert_eq!(state.release(p, 2 * T, 5, lease.mark), 5);
        assert_eq!(state, State::Gcra(Gcra { tat: 6 * T }));
        // A return at 8T of 5 more from that lease: only 2T of it is ahead of now.
        let mut late = State::Gcra(Gcra { tat: 11 * T });
        assert_eq!(late.release(p, 8 * T, 5, lease.mark), 2);
        assert_eq!(late, State::Gcra(Gcra { tat: 9 * T }));
        // Never before now.
        let mut alone = State::Gcra(Gcra { tat: 10 * T });
        assert_eq!(alone.release(p, 3 * T, 50, 10 * T), 7);
        assert_eq!(alone, State::Gcra(Gcra { tat: 3 * T }));
    }

    #[test]
    fn the_token_bucket_leases_and_returns_as_gcra_does() {
        let p = &bucket(Algorithm::TokenBucket);
        let mut state = State::new(Algorithm::TokenBucket);
        let lease = state.acquire(p, 0, 1, 10);
        assert_eq!((lease.granted, lease.mark), (10, 10 * T));
        assert_eq!(lease.decision.remaining, 10);
        assert!(state.check(p, 20 * T, 1).allowed);
        assert_eq!(state.release(p, 20 * T, 5, lease.mark), 0);
        // As GCRA's TAT of 21T: 19 tokens at 20T, full at 21T.
        assert_eq!(
            state.clone().check(p, 20 * T, 1).reset_after,
            Duration::from_micros(2 * T)
        );
        let mut other = State::new(Algorithm::TokenBucket);
        let lease = other.acquire(p, 0, 1, 10);
        assert!(other.check(p, 0, 1).allowed);
        assert_eq!(other.release(p, 2 * T, 5, lease.mark), 5);
        // 20 − 11 + 2 refilled + 5 returned = 16 tokens at 2T, as GCRA's TAT of 6T.
        assert_eq!(other.clone().check(p, 2 * T, 1).remaining, 15);
    }

    #[test]
    fn a_bucket_lease_is_capped_by_the_burst_and_min_is_all_or_nothing() {
        let p = &bucket(Algorithm::Gcra);
        let mut state = State::new(Algorithm::Gcra);
        assert_eq!(state.acquire(p, 0, 1, 50).granted, 20);
        // At 3T three units are back: a lease of at least 4 gets none, and the denial says
        // when 4 fit.
        let denied = state.acquire(p, 3 * T, 4, 10);
        assert_eq!(denied.granted, 0);
        assert_eq!(denied.decision.retry_after, Some(Duration::from_micros(T)));
        assert_eq!(state.acquire(p, 3 * T, 3, 10).granted, 3);
        // More than the burst never fits.
        assert_eq!(state.acquire(p, 99 * T, 21, 21).decision.retry_after, None);
    }

    #[test]
    fn a_window_takes_back_only_in_the_same_window() {
        for algorithm in [Algorithm::FixedWindow, Algorithm::FixedWindowFromFirst] {
            let p = &Quota::per_second(10).unwrap().params(algorithm);
            let start = 7_000_000;
            let mut state = State::new(algorithm);
            let lease = state.acquire(p, start, 1, 6);
            assert_eq!((lease.granted, lease.mark), (6, start));
            assert!(state.check(p, start + 1, 3).allowed);
            assert_eq!(state.release(p, start + 2, 4, lease.mark), 4);
            assert_eq!(state.clone().check(p, start + 2, 1).remaining, 4);
            // In the next window, nothing is given back.
            let mut next = state.clone();
            assert!(next.check(p, start + 1_000_000, 1).allowed);
            assert_eq!(next.release(p, start + 1_000_000, 2, lease.mark), 0);
            assert_eq!(state.release(p, start + 1_000_000, 2, lease.mark), 0);
        }
    }

    impl State {
        /// The same GCRA state under `algorithm` (GCRA or the leaky bucket).
        fn with(self, algorithm: Algorithm) -> State {
            match (self, algorithm) {
                (State::Gcra(s), Algorithm::LeakyBucket) => State::LeakyBucket(s),
                (s, _) => s,
            }
        }
    }
}
