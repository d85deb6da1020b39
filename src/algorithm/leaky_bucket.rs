//! Leaky bucket as a queue: one slot drains every `T`.
//!
//! A request of cost `c` takes `c` consecutive slots, the first at
//! `start = max(now, last + T)`, the last at `end = start + (c − 1)·T`, and is allowed iff
//! `end − now ≤ (B − 1)·T`, i.e. the queue holds at most `B` slots. The state is `last`, the time
//! of the last slot handed out.
//!
//! It admits exactly what [`Gcra`](super::gcra::Gcra) admits (`last + T` is GCRA's `tat`). Its
//! point is the layer's delay mode (`rules::Mode::Delay`): the queue is lengthened by the slots
//! that fit in `max_delay`, and a request past the burst waits for its slot instead of being
//! denied, so requests leave at a steady rate (see `rules::DelayQueue`).
//!
//! A request whose cost is larger than the burst `B` can never be allowed: it is denied with
//! `retry_after = None`.

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
    ///
    /// A model the tests check `reset_after` against; the layer's delay mode waits only past
    /// the burst (`rules::DelayQueue::release`).
    #[cfg(test)]
    pub(crate) fn delay(p: &Params, decision: &Decision, cost: u64) -> std::time::Duration {
        if !decision.allowed {
            return std::time::Duration::ZERO;
        }
        let held = cost.max(1).saturating_mul(p.interval.max(1));
        let reset_after = u64::try_from(decision.reset_after.as_micros()).unwrap_or(u64::MAX);
        std::time::Duration::from_micros(reset_after.saturating_sub(held))
    }
}

#[cfg(test)]
mod tests {
    //! The sequences all three buckets share, delays included, are in `shared_tests`.

    use std::time::Duration;

    use proptest::prelude::*;

    use super::super::tests::{history, params, start};
    use super::*;
    use crate::Algorithm;

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
