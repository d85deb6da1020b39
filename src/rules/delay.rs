//! Delay mode, whole: the queue a rule's quota becomes, and how long an admitted request
//! waits in it.
//!
//! A delay-mode rule is enforced by the store as a leaky bucket whose queue is longer than
//! the rule's burst by the slots that fit in `max_delay`: a request is admitted if its slot
//! starts within `max_delay`. [`DelayQueue::release`] turns the store's decision back into
//! the wait before the request may go and the decision as the rule's own quota sees it. The
//! wait itself is a state of the response future.

use std::time::Duration;

use crate::algorithm::{Algorithm, Params};
use crate::decision::Decision;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::quota::{Policy, Quota};

/// A delay-mode rule's queue: how long a request may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DelayQueue {
    max_delay: Duration,
}

impl DelayQueue {
    /// The queue of a delay-mode rule using `algorithm`; it needs a bucket algorithm and a
    /// `max_delay` longer than zero.
    pub(crate) fn new(
        algorithm: Algorithm,
        max_delay: Option<Duration>,
    ) -> Result<Self, ConfigError> {
        let fail = |message: String| Err(ConfigError::with_kind(ConfigErrorKind::Rule, message));
        let Some(max_delay) = max_delay else {
            return fail(
                "mode delay needs max_delay, the longest a request may wait (e.g. max_delay = \"2s\")"
                    .into(),
            );
        };
        if max_delay.is_zero() {
            return fail("max_delay must be longer than zero".into());
        }
        if !algorithm.uses_burst() {
            return fail(format!(
                "mode delay queues requests like a leaky bucket; it works with gcra, \
                 token_bucket or leaky_bucket, not {algorithm}"
            ));
        }
        Ok(Self { max_delay })
    }

    /// The policy the store enforces for `quota`: a leaky bucket whose queue is longer by the
    /// slots that fit in `max_delay`.
    pub(crate) fn policy(&self, name: &str, quota: Quota) -> Result<Policy, ConfigError> {
        let params = quota.params(Algorithm::LeakyBucket);
        let queue = self.queue_slots(&params);
        let burst = u32::try_from(params.burst.saturating_add(queue)).map_err(|_| {
            ConfigError::with_kind(
                ConfigErrorKind::Rule,
                "max_delay is too long for this quota (the queue would be too long)",
            )
        })?;
        Policy::new(name, quota.burst(burst)?, Algorithm::LeakyBucket)
    }

    /// For the store's decision under [`policy`](Self::policy): how long the request must
    /// wait before it goes, and the decision as the rule's own quota sees it (its burst as
    /// the limit, queued requests not counted as remaining).
    pub(crate) fn release(&self, quota: &Quota, decision: Decision) -> (Duration, Decision) {
        let params = quota.params(Algorithm::LeakyBucket);
        let queue = self.queue_slots(&params);
        // The leaky bucket's reset_after is the end of the request's last slot plus one
        // interval; its first slot starts `cost` intervals before that. Waiting is needed
        // only past the burst.
        let immediate = params.burst.saturating_mul(params.interval);
        let reset = u64::try_from(decision.reset_after.as_micros()).unwrap_or(u64::MAX);
        let wait = if decision.allowed {
            Duration::from_micros(reset.saturating_sub(immediate))
        } else {
            Duration::ZERO
        };
        let own = Decision {
            limit: params.burst,
            remaining: decision.remaining.saturating_sub(queue),
            ..decision
        };
        (wait.min(self.max_delay), own)
    }

    /// How many extra slots of `interval` fit in `max_delay`.
    fn queue_slots(&self, params: &Params) -> u64 {
        let max_delay = u64::try_from(self.max_delay.as_micros()).unwrap_or(u64::MAX);
        max_delay / params.interval.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::MemoryStore;

    #[test]
    fn requests_past_the_burst_wait_for_their_slot_up_to_max_delay() {
        // 2/s, burst 1, up to 1.2 s of waiting: slots every 500 ms, two of them queued.
        let quota: Quota = "2/s; burst=1".parse().unwrap();
        let queue = DelayQueue::new(Algorithm::Gcra, Some(Duration::from_millis(1_200))).unwrap();
        let policy = queue.policy("export", quota).unwrap();
        let store = MemoryStore::with_clock(ManualClock::new(1_000_000));
        let waits: Vec<Option<u128>> = (0..4)
            .map(|_| {
                let (wait, own) = queue.release(&quota, store.check_now("k", &policy, 1));
                assert_eq!(own.limit, 1);
                own.allowed.then_some(wait.as_millis())
            })
            .collect();
        assert_eq!(waits, [Some(0), Some(500), Some(1_000), None]);
    }

    #[test]
    fn needs_a_bucket_and_a_max_delay() {
        let e = DelayQueue::new(Algorithm::FixedWindow, Some(Duration::from_secs(1))).unwrap_err();
        assert!(
            e.to_string().contains("gcra, token_bucket or leaky_bucket"),
            "{e}"
        );
        let e = DelayQueue::new(Algorithm::Gcra, None).unwrap_err();
        assert!(e.to_string().contains("needs max_delay"), "{e}");
        let e = DelayQueue::new(Algorithm::Gcra, Some(Duration::ZERO)).unwrap_err();
        assert!(e.to_string().contains("longer than zero"), "{e}");
    }
}
