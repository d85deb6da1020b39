//! How long the xDS client waits, in the reference's two layers of waiting
//! (`src/provider/xds_grpc_sotw_provider.go:68-146`):
//! - between connection attempts while it dials (its `grpc.Dial` with `grpc.WithBlock()`):
//!   gRPC's connection back-off, [`connection_backoff`], so a control plane that starts later
//!   is reached about a second after it listens;
//! - before dialing again after an established stream breaks: [`XdsBackoff`], the reference's
//!   jpillora/backoff with its `XDS_CLIENT_BACKOFF_*` settings.
//!
//! Its third layer, a stream call's retry (`grpc_retry.StreamClientInterceptor` with
//! `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`), never waits: go-grpc-middleware v1.4.0
//! retries nothing without `WithMax`, which the reference does not give (retry/options.go:21-29,
//! retry/retry.go:84-86), and would refuse to retry a bidirectional stream such as the discovery
//! stream anyway (retry.go:87-89).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

/// The wait before dialing the control plane again after an established stream breaks (the
/// reference's `XDS_CLIENT_BACKOFF_*`), as jpillora/backoff's `Duration()` computes it for
/// the reference: the `n`th wait (from 0) is `initial × factor^n`, with `jitter` a uniform pick
/// between `initial` and that, always within `initial..=max`. The reference never resets `n`,
/// nor does tollgate. Its default factor, 0.5, is below 1, so every wait is `initial`: 10 s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct XdsBackoff {
    /// The first and shortest wait (`XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`, default 10 s; zero
    /// means 100 ms, jpillora's default).
    pub initial: Duration,
    /// The longest wait (`XDS_CLIENT_BACKOFF_MAX_INTERVAL`, default 60 s; zero means 10 s,
    /// jpillora's default). When it is not above `initial`, every wait is `max`.
    pub max: Duration,
    /// What each wait is multiplied by (`XDS_CLIENT_BACKOFF_RANDOM_FACTOR`, which the reference
    /// passes as jpillora's `Factor`; default 0.5; zero, negative or not finite means 2).
    pub factor: f64,
    /// Whether a wait is picked at random between `initial` and its computed value
    /// (`XDS_CLIENT_BACKOFF_JITTER`, default true).
    pub jitter: bool,
}

impl Default for XdsBackoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            factor: 0.5,
            jitter: true,
        }
    }
}

impl XdsBackoff {
    /// The wait before reconnection `attempt` (0 for the first): jpillora/backoff v1.0.0's
    /// `ForAttempt` (backoff.go:42-80).
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let min = match self.initial.is_zero() {
            true => Duration::from_millis(100),
            false => self.initial,
        };
        let max = match self.max.is_zero() {
            true => Duration::from_secs(10),
            false => self.max,
        };
        if min >= max {
            return max;
        }
        let factor = match self.factor > 0.0 && self.factor.is_finite() {
            true => self.factor,
            false => 2.0,
        };
        let (minf, maxf) = (min.as_secs_f64(), max.as_secs_f64());
        let mut wait = minf * factor.powf(f64::from(attempt));
        if self.jitter {
            wait = uniform() * (wait - minf) + minf;
        }
        Duration::from_secs_f64(wait.clamp(minf, maxf))
    }
}

/// gRPC's first wait between connection attempts (grpc/grpc doc/connection-backoff.md, as
/// grpc-go's internal/backoff/backoff.go implements it).
const CONNECTION_BASE: f64 = 1.0;
/// How much longer each next wait is.
const CONNECTION_MULTIPLIER: f64 = 1.6;
/// How far a wait is spread, either way.
const CONNECTION_JITTER: f64 = 0.2;
/// gRPC's longest wait between connection attempts.
const CONNECTION_MAX: f64 = 120.0;

/// The time a connection attempt is given at least (gRPC's `MIN_CONNECT_TIMEOUT`); an attempt
/// whose back-off is longer is given its back-off.
pub(crate) const MIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// The wait after failed connection attempt `retries` (0 for the first) before the next:
/// 1 s, then ×1.6 per failure up to 120 s, spread by ±20 % (the first wait is not spread),
/// as grpc-go's `Exponential.Backoff` computes it.
pub(crate) fn connection_backoff(retries: u32) -> Duration {
    if retries == 0 {
        return Duration::from_secs_f64(CONNECTION_BASE);
    }
    let (mut wait, mut left) = (CONNECTION_BASE, retries);
    while wait < CONNECTION_MAX && left > 0 {
        wait *= CONNECTION_MULTIPLIER;
        left -= 1;
    }
    let spread = 1.0 + CONNECTION_JITTER * (uniform() * 2.0 - 1.0);
    Duration::from_secs_f64(wait.min(CONNECTION_MAX) * spread)
}

/// A uniform number in [0, 1): std's randomly keyed hasher, fresh keys per call.
fn uniform() -> f64 {
    (RandomState::new().hash_one(0u8) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis(b: &XdsBackoff, attempts: std::ops::Range<u32>) -> Vec<u128> {
        attempts.map(|a| b.delay(a).as_millis()).collect()
    }

    #[test]
    fn the_references_defaults_wait_the_initial_interval_every_time() {
        // Factor 0.5: initial × 0.5^n is below initial, and jitter picks between the two, so
        // jpillora keeps every wait at its minimum (xds_grpc_sotw_provider.go:71-76).
        let b = XdsBackoff::default();
        assert!((0..50).all(|a| b.delay(a) == Duration::from_secs(10)));
        let b = XdsBackoff { jitter: false, ..b };
        assert!((0..50).all(|a| b.delay(a) == Duration::from_secs(10)));
    }

    #[test]
    fn a_factor_above_one_multiplies_up_to_the_maximum() {
        let b = XdsBackoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(700),
            factor: 2.0,
            jitter: false,
        };
        assert_eq!(millis(&b, 0..5), [100, 200, 400, 700, 700]);
        assert_eq!(b.delay(u32::MAX), Duration::from_millis(700));
        let b = XdsBackoff { factor: 3.0, ..b };
        assert_eq!(millis(&b, 0..4), [100, 300, 700, 700]);
    }

    #[test]
    fn jitter_picks_between_the_initial_interval_and_the_computed_wait() {
        let b = XdsBackoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
            factor: 2.0,
            jitter: true,
        };
        assert_eq!(b.delay(0), Duration::from_secs(1));
        let waits: Vec<_> = (0..300).map(|_| b.delay(2)).collect();
        let (lo, hi) = (waits.iter().min().unwrap(), waits.iter().max().unwrap());
        assert!(*lo >= Duration::from_secs(1) && *hi <= Duration::from_secs(4));
        assert!(*lo < Duration::from_millis(1300) && *hi > Duration::from_millis(3700));
    }

    #[test]
    fn zero_values_take_jpilloras_defaults() {
        let b = XdsBackoff {
            initial: Duration::ZERO,
            max: Duration::ZERO,
            factor: 0.0,
            jitter: false,
        };
        // 100 ms doubling, up to 10 s.
        assert_eq!(millis(&b, 0..3), [100, 200, 400]);
        assert_eq!(b.delay(10), Duration::from_secs(10));
        let b = XdsBackoff {
            factor: f64::NAN,
            ..b
        };
        assert_eq!(b.delay(1), Duration::from_millis(200));
        // An initial interval at or past the maximum: every wait is the maximum.
        let b = XdsBackoff {
            initial: Duration::from_secs(90),
            ..XdsBackoff::default()
        };
        assert_eq!(b.delay(0), Duration::from_secs(60));
    }

    #[test]
    fn connection_attempts_follow_grpcs_backoff() {
        assert_eq!(connection_backoff(0), Duration::from_secs(1));
        for (retries, centre) in [(1, 1.6), (2, 2.56), (3, 4.096), (10, 109.95), (11, 120.0)] {
            let waits: Vec<f64> = (0..200)
                .map(|_| connection_backoff(retries).as_secs_f64())
                .collect();
            let lo = waits.iter().copied().fold(f64::MAX, f64::min);
            let hi = waits.iter().copied().fold(0.0, f64::max);
            assert!(
                lo >= centre * 0.8 - 0.01 && hi <= centre * 1.2 + 0.01,
                "{retries}"
            );
            assert!(hi - lo > centre * 0.2, "{retries}: spread {lo}..{hi}");
        }
        assert!(connection_backoff(u32::MAX) <= Duration::from_secs(144));
    }
}
