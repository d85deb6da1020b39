//! Sliding window log: the exact log of allowed requests in the last period.
//!
//! An entry allowed at `t` counts while `now < t + P`, so the log holds what was allowed in
//! `(now − P, now]`; a request of cost `c` counts as `c` and is allowed iff the log's total plus
//! `c` stays within `L`. No boundary bursts and no estimate: exactly `L` per any window of
//! length `P`.
//!
//! The price is memory: the log keeps one entry per distinct microsecond with an allowed request,
//! up to `L` entries per key (the Redis script keeps one sorted-set member per entry). A
//! request's cost is a number in its entry, never one entry per unit, so a request of any cost
//! costs the same. Prefer GCRA or the sliding window counter for large limits. A request whose
//! cost is larger than `L` can never be allowed: it is denied with `retry_after = None`.
//!
//! Each entry keeps the running total of cost logged up to and including it (`end`), so the
//! count is one subtraction and the entry that frees enough room for a denied request is found
//! by binary search: O(log n) per decision, as in Redis. Running totals wrap (`u64` here, 2^52
//! in Lua); only differences of totals less than `L` apart are ever taken, so wrapping changes
//! nothing.

use std::collections::VecDeque;

use super::Params;
use crate::decision::Decision;

/// One key's log. `Default` (empty) is a key with no history.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SlidingWindowLog {
    /// Allowed requests, oldest first, one entry per distinct time.
    pub(super) entries: VecDeque<Entry>,
    /// The running total before the oldest entry: the count is `newest.end − base`.
    pub(super) base: u64,
}

/// The requests allowed at one microsecond.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Entry {
    /// When, µs.
    pub(super) at: u64,
    /// The running total of cost logged up to and including this entry (wrapping).
    pub(super) end: u64,
}

impl SlidingWindowLog {
    /// Decides a request of `cost` at `now`; logs it only when allowed. Drops expired entries.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let period = p.period.max(1);
        let newest = self.entries.back().map(|e| e.at);
        // A clock that went back is treated as standing at the newest entry: the log stays sorted.
        let at = now.max(newest.unwrap_or(0));
        // Expired entries go on every call, as in the Redis script; they decide nothing.
        while let Some(&oldest) = self.entries.front() {
            if oldest.at.saturating_add(period) > at {
                break;
            }
            self.entries.pop_front();
            self.base = oldest.end;
        }
        if self.entries.is_empty() {
            // As a new key: Redis deletes a sorted set once its last member goes.
            self.base = 0;
        }
        let count = self.count();
        if count.saturating_add(cost) <= p.limit {
            match self.entries.back_mut() {
                Some(e) if e.at == at => e.end = e.end.wrapping_add(cost),
                _ => {
                    let end = self.total().wrapping_add(cost);
                    self.entries.push_back(Entry { at, end });
                }
            }
            return Decision::from_micros(
                true,
                p.burst,
                p.limit - count - cost,
                at.saturating_add(period).saturating_sub(now),
                None,
            );
        }
        let retry_after = if cost <= p.limit {
            // The oldest entries must expire until `count − freed + cost ≤ L`; the entry that
            // completes that expires at `t + P`, and nothing is freed before it.
            let need = count.saturating_add(cost) - p.limit;
            let ready = self
                .entries
                .partition_point(|e| e.end.wrapping_sub(self.base) < need);
            self.entries
                .get(ready)
                .map(|e| e.at.saturating_add(period).saturating_sub(now))
        } else {
            None
        };
        let reset_after = match newest {
            Some(t) if count > 0 => t.saturating_add(period).saturating_sub(now),
            _ => 0,
        };
        Decision::from_micros(
            false,
            p.burst,
            p.limit.saturating_sub(count),
            reset_after,
            retry_after,
        )
    }

    /// Records a denied request of `cost` at `now` (charged while over), after `check` has
    /// dropped the expired entries: logged like an allowed one, but only as much of it as
    /// keeps the log's total within `2·L` (a log already above gets nothing more), so the
    /// log stays bounded.
    pub(crate) fn record(&mut self, p: &Params, now: u64, cost: u64) {
        let room = p.limit.saturating_mul(2).saturating_sub(self.count());
        let cost = cost.min(room);
        if cost == 0 {
            return;
        }
        let at = now.max(self.entries.back().map_or(0, |e| e.at));
        match self.entries.back_mut() {
            Some(e) if e.at == at => e.end = e.end.wrapping_add(cost),
            _ => {
                let end = self.total().wrapping_add(cost);
                self.entries.push_back(Entry { at, end });
            }
        }
    }

    /// The cost logged in the entries kept.
    pub(super) fn count(&self) -> u64 {
        self.total().wrapping_sub(self.base)
    }

    /// The running total through the newest entry.
    fn total(&self) -> u64 {
        self.entries.back().map_or(self.base, |e| e.end)
    }

    /// Once the newest entry has expired the log is empty in effect.
    /// Removes the newest `n` units of the log.
    pub(crate) fn refund(&mut self, n: u64) {
        let mut left = n;
        while left > 0 {
            let len = self.entries.len();
            let before = match len {
                0 => break,
                1 => self.base,
                _ => self.entries.get(len - 2).map_or(self.base, |e| e.end),
            };
            let Some(newest) = self.entries.back_mut() else {
                break;
            };
            let cost = newest.end.wrapping_sub(before);
            if cost > left {
                newest.end = newest.end.wrapping_sub(left);
                break;
            }
            left -= cost;
            self.entries.pop_back();
        }
        if self.entries.is_empty() {
            self.base = 0;
        }
    }

    pub(crate) fn expires_at(&self, p: &Params) -> u64 {
        self.entries
            .back()
            .map_or(0, |e| e.at.saturating_add(p.period.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::support::{d, setup, UNALIGNED};
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::quota::Quota;

    const T0: u64 = UNALIGNED;

    impl SlidingWindowLog {
        /// The log as a denied request at `now` leaves it: without the expired entries.
        pub(in crate::algorithm) fn without_expired(&self, p: &Params, now: u64) -> Self {
            let at = now.max(self.entries.back().map_or(0, |e| e.at));
            let mut log = self.clone();
            while log.entries.front().is_some_and(|e| e.at + p.period <= at) {
                log.base = log.entries.pop_front().map_or(log.base, |e| e.end);
            }
            if log.entries.is_empty() {
                log.base = 0;
            }
            log
        }

        /// One entry per time, oldest first, each holding some cost, and their count within `L`.
        pub(in crate::algorithm) fn is_well_formed(&self, p: &Params) -> bool {
            let times = self.entries.iter().map(|e| e.at);
            let ends = self.entries.iter().map(|e| e.end.wrapping_sub(self.base));
            times.clone().zip(times.skip(1)).all(|(a, b)| a < b)
                && std::iter::once(0)
                    .chain(ends.clone())
                    .zip(ends)
                    .all(|(a, b)| a < b)
                && self.count() <= p.limit
        }
    }

    #[test]
    fn each_entry_frees_its_slot_one_period_later() {
        let (store, clock, policy) = setup(
            Algorithm::SlidingWindowLog,
            T0,
            Quota::per_second(3).unwrap(),
        );
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 2, 1_000_000, None)
        );
        clock.set(T0 + 200_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 1, 1_000_000, None)
        );
        clock.set(T0 + 500_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 0, 1_000_000, None)
        );
        clock.set(T0 + 600_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, false, 0, 900_000, Some(400_000))
        );
        // The edge: the first entry counts until T0 + P − 1 and is gone at T0 + P.
        clock.set(T0 + 999_999);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, false, 0, 500_001, Some(1))
        );
        clock.set(T0 + 1_000_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 0, 1_000_000, None)
        );
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, false, 0, 1_000_000, Some(200_000))
        );
        // No boundary burst: at most 3 in any period.
        clock.set(T0 + 1_200_000);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(3, true, 0, 1_000_000, None)
        );
        assert!(!store.check_now("k", &policy, 1).allowed);
    }

    #[test]
    fn cost_counts_and_retry_waits_for_enough_entries() {
        let (store, clock, policy) = setup(
            Algorithm::SlidingWindowLog,
            T0,
            Quota::per_minute(10).unwrap(),
        );
        assert_eq!(
            store.check_now("k", &policy, 4),
            d(10, true, 6, 60_000_000, None)
        );
        clock.set(T0 + 10_000_000);
        assert_eq!(
            store.check_now("k", &policy, 3),
            d(10, true, 3, 60_000_000, None)
        );
        clock.set(T0 + 20_000_000);
        assert_eq!(
            store.check_now("k", &policy, 3),
            d(10, true, 0, 60_000_000, None)
        );
        // Needs 5 units freed: the 4 at T0 are not enough, the 3 at T0 + 10 s complete it.
        clock.set(T0 + 30_000_000);
        assert_eq!(
            store.check_now("k", &policy, 5),
            d(10, false, 0, 50_000_000, Some(40_000_000))
        );
        assert_eq!(
            store.check_now("k", &policy, 4),
            d(10, false, 0, 50_000_000, Some(30_000_000))
        );
        assert_eq!(
            store.check_now("k", &policy, 11),
            d(10, false, 0, 50_000_000, None)
        );
        clock.set(T0 + 60_000_000);
        assert_eq!(
            store.check_now("k", &policy, 4),
            d(10, true, 0, 60_000_000, None)
        );
        assert_eq!(
            store.check_now("new", &policy, 11),
            d(10, false, 10, 0, None)
        );
    }

    #[test]
    fn sub_millisecond_period() {
        let (store, clock, policy) = setup(
            Algorithm::SlidingWindowLog,
            T0,
            Quota::new(2, Duration::from_micros(100)).unwrap(),
        );
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 1, 100, None));
        clock.set(T0 + 30);
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 0, 100, None));
        clock.set(T0 + 60);
        assert_eq!(
            store.check_now("k", &policy, 1),
            d(2, false, 0, 70, Some(40))
        );
        assert_eq!(
            store.check_now("k", &policy, 2),
            d(2, false, 0, 70, Some(70))
        );
        clock.set(T0 + 100);
        assert_eq!(store.check_now("k", &policy, 1), d(2, true, 0, 100, None));
        clock.set(T0 + 500);
        assert_eq!(store.check_now("k", &policy, 2), d(2, true, 0, 100, None));
    }
}
