//! GCRA (generic cell rate algorithm): one timestamp per key.
//!
//! The state is the theoretical arrival time `tat`: the time at which the key's bucket would be
//! empty again. A request of cost `c` moves it to `new = max(tat, now) + c·T`, and is allowed iff
//! `new − now ≤ B·T`. Everything else (remaining, reset, retry) follows from `tat − now`, so the
//! Redis script needs one `GET` and, on allow, one `SET`.
//!
//! A request whose cost is larger than the burst `B` can never be allowed: it is denied with
//! `retry_after = None`.
//!
//! # The leaky bucket is this engine
//!
//! `Algorithm::LeakyBucket` is a queue that drains one slot every `T`: a request of cost `c`
//! takes `c` consecutive slots, the first at `start = max(now, last + T)`, the last at
//! `end = start + (c − 1)·T`, and is allowed iff `end − now ≤ (B − 1)·T`, after which
//! `last = end`. With `tat = last + T` that is GCRA step for step: `end + T = max(tat, now) + c·T`
//! is GCRA's `new`, the test is `new − now ≤ B·T`, and `remaining`, `reset_after` and
//! `retry_after` come out the same, a clock that goes back included. So both names run this
//! state machine (and `store/redis/lua/gcra.lua`), each under its own keys. What the leaky
//! bucket adds is the layer's delay mode: an allowed request waits until `start`
//! (`reset_after − c·T` from its decision), so requests leave at a steady rate.

use super::{rescaled, Params, Scale};
use crate::decision::Decision;

/// One key's GCRA state.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Gcra {
    /// Theoretical arrival time in µs. Any value `≤ now` (0 for a new key) means a full bucket.
    pub(super) tat: u64,
}

impl Gcra {
    /// Decides a request of `cost` at `now`; stores the new `tat` only when allowed.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        // `max(tat, now) − now`: the part of the bucket in use right now.
        let backlog = self.tat.saturating_sub(now);
        let deny = |retry_after| {
            let remaining = units_in(capacity.saturating_sub(backlog), t);
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

    /// Records a denied request of `cost` at `now` (charged while over): the TAT moves on by
    /// `c·T` into debt, but never past `now + 2·B·T` (one bucket beyond the capacity), and a
    /// TAT already further (a clock that went back) stays where it is.
    pub(crate) fn record(&mut self, p: &Params, now: u64, cost: u64) {
        let t = p.interval.max(1);
        let most = p.burst.saturating_mul(t).saturating_mul(2);
        let backlog = self.tat.saturating_sub(now);
        let after = backlog.saturating_add(cost.saturating_mul(t));
        self.tat = now.saturating_add(after.min(most.max(backlog)));
    }

    /// The bucket is full again, and the key decides like a new one, from `tat` on.
    /// Gives back `n` units at `now`: the TAT moves back by `n·T`, never before `now` (units
    /// already drained were given back by time itself).
    pub(crate) fn refund(&mut self, p: &Params, now: u64, n: u64) {
        if self.tat > now {
            let back = n.saturating_mul(p.interval.max(1));
            self.tat = self.tat.saturating_sub(back).max(now);
        }
    }

    /// Reads a state kept in scale `from` in `p`'s (see `Scale`): the backlog is what was
    /// used, `backlog / T` units, converted to as many of `p`'s and capped at two of its
    /// buckets, as a debt charged while over is.
    pub(crate) fn rescale(&mut self, from: Scale, p: &Params, now: u64) {
        if self.tat > now {
            let t = p.interval.max(1);
            let cap = p.burst.saturating_mul(t).saturating_mul(2);
            let backlog = rescaled(self.tat - now, from.interval.max(1), t, cap);
            self.tat = now.saturating_add(backlog);
        }
    }

    pub(crate) fn expires_at(&self, _p: &Params) -> u64 {
        self.tat
    }

    /// The TAT: when the state expires, whatever the quota (the memory store keeps nothing
    /// else for a GCRA key).
    pub(crate) fn tat(&self) -> u64 {
        self.tat
    }
}

/// Whole units of `t` µs in `room` µs: `room / t`, without the division when less than one
/// fits, as on every denial of cost 1 (the room left is then below `t`), where the division
/// would be the slowest step of the decision.
#[inline(always)]
fn units_in(room: u64, t: u64) -> u64 {
    if room < t {
        0
    } else {
        room / t
    }
}

#[cfg(test)]
mod tests {
    //! The sequences all three buckets share are in `tests/shared.rs`.

    use std::time::Duration;

    use proptest::prelude::*;

    use super::super::tests::support::delay;
    use super::super::tests::{history, params, start};
    use super::*;
    use crate::{Algorithm, Quota};

    proptest! {
        #[test]
        fn a_leaky_buckets_delay_is_the_wait_for_its_first_slot(
            p in params(Algorithm::LeakyBucket),
            start in start(),
            steps in history(true),
        ) {
            let mut s = Gcra::default();
            let mut now = start;
            for step in steps {
                now = step.next(now, &p, Algorithm::LeakyBucket);
                let cost = step.cost(&p);
                // The first slot is at `max(now, last + T)`, and `last + T` is the TAT.
                let first_slot = s.tat.max(now);
                let d = s.check(&p, now, cost);
                let wait = if d.allowed { first_slot - now } else { 0 };
                prop_assert_eq!(delay(&p, &d, cost), Duration::from_micros(wait));
            }
        }
    }

    #[test]
    fn interval_is_rounded_up() {
        // 3 per 100 µs: T = 34 µs, never more than 3 per 100 µs once the burst is spent.
        let p = Quota::new(3, Duration::from_micros(100))
            .unwrap()
            .params(Algorithm::Gcra);
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
}
