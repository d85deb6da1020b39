//! How long the xDS client waits before it connects again: exponential from an initial wait
//! up to a maximum, each wait spread at random (jitter) so that many instances that lost the
//! same control plane do not all call it again at the same moment.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

/// The waits between attempts to reach the control plane (the reference's
/// `XDS_CLIENT_BACKOFF_*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct XdsBackoff {
    /// The first wait (`XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`, default 10 s).
    pub initial: Duration,
    /// The longest wait (`XDS_CLIENT_BACKOFF_MAX_INTERVAL`, default 60 s).
    pub max: Duration,
    /// How far a wait is spread when `jitter`: up to this fraction either way
    /// (`XDS_CLIENT_BACKOFF_RANDOM_FACTOR`, default 0.5).
    pub random_factor: f64,
    /// Whether waits are spread at random (`XDS_CLIENT_BACKOFF_JITTER`, default true).
    pub jitter: bool,
}

impl Default for XdsBackoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            random_factor: 0.5,
            jitter: true,
        }
    }
}

impl XdsBackoff {
    /// The wait before attempt `attempt` (0 for the first reconnection): `initial` doubled
    /// per attempt, at most `max`, then spread.
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let doubled = self.initial.saturating_mul(1 << attempt.min(20));
        let base = doubled.min(self.max.max(self.initial));
        if !self.jitter {
            return base;
        }
        let factor = self.random_factor.clamp(0.0, 1.0);
        // A uniform number in [-1, 1): std's randomly keyed hasher, fresh keys per call.
        let random = RandomState::new().hash_one(attempt) as f64 / u64::MAX as f64 * 2.0 - 1.0;
        base.mul_f64(1.0 + factor * random)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_maximum() {
        let b = XdsBackoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(700),
            jitter: false,
            ..XdsBackoff::default()
        };
        let waits: Vec<_> = (0..5).map(|a| b.delay(a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 700, 700]);
        assert_eq!(b.delay(u32::MAX), Duration::from_millis(700));
    }

    #[test]
    fn jitter_spreads_within_the_factor() {
        let b = XdsBackoff {
            initial: Duration::from_secs(1),
            ..XdsBackoff::default()
        };
        let waits: Vec<_> = (0..200).map(|_| b.delay(0)).collect();
        assert!(waits
            .iter()
            .all(|w| *w >= Duration::from_millis(500) && *w <= Duration::from_millis(1500)));
        let (lo, hi) = (waits.iter().min().unwrap(), waits.iter().max().unwrap());
        assert!(*hi - *lo > Duration::from_millis(300), "{lo:?}..{hi:?}");
    }
}
