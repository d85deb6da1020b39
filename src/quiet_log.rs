//! [`QuietLog`]: lets a recurring event be logged at most once per interval.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Lets a recurring event (a store error, a shadow denial) be logged at most once per
/// interval, with how many were not, so an outage does not flood the logs.
#[derive(Debug)]
pub(crate) struct QuietLog {
    interval: u64,
    next_at: AtomicU64,
    suppressed: AtomicU64,
    epoch: Instant,
}

impl QuietLog {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval: u64::try_from(interval.as_micros()).unwrap_or(u64::MAX),
            next_at: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// `Some(n)` when this occurrence should be logged, `n` being how many were not since the
    /// last one that was; `None` (and it is counted) otherwise.
    pub(crate) fn should_log(&self) -> Option<u64> {
        let now = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
        let next_at = self.next_at.load(Ordering::Acquire);
        if now >= next_at
            && self
                .next_at
                .compare_exchange(
                    next_at,
                    now.saturating_add(self.interval),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::AcqRel))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lets_one_through_per_interval_and_counts_the_rest() {
        let log = QuietLog::new(Duration::from_secs(60));
        assert_eq!(log.should_log(), Some(0));
        assert_eq!(log.should_log(), None);
        assert_eq!(log.should_log(), None);
        let every_time = QuietLog::new(Duration::ZERO);
        assert_eq!(every_time.should_log(), Some(0));
        assert_eq!(every_time.should_log(), Some(0));
    }
}
