//! What happens when a store fails: the policy, a circuit breaker, and quiet logging.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// What the layer does when the store cannot decide (error, timeout, open circuit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnStoreError {
    /// Let the request through without rate-limit headers (fail open). The default: a Redis
    /// outage never becomes an outage of the app.
    #[default]
    Allow,
    /// Answer 503 with `Retry-After` (gRPC: UNAVAILABLE) (fail closed).
    Deny,
    /// Decide with an in-process limiter with the same policies, so each instance keeps
    /// limiting on its own while the store is away.
    FallbackToMemory,
}

impl std::str::FromStr for OnStoreError {
    type Err = crate::ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(Self::Allow),
            "deny" => Ok(Self::Deny),
            "fallback" | "fallback_to_memory" => Ok(Self::FallbackToMemory),
            other => Err(crate::ConfigError::of(
                crate::ConfigErrorKind::Store,
                format!("unknown store error policy {other:?} (use allow, deny or fallback)"),
            )),
        }
    }
}

/// Settings of the circuit breaker that stops calling a failing store.
///
/// After `failures` consecutive failures the circuit opens: decisions are answered by the
/// [`OnStoreError`] policy at once, with no call and no timeout. After a back-off (starting at
/// `min_open`, doubling up to `max_open` while probes fail, with ±20% jitter so instances do
/// not probe in step) one request probes the store; success closes the circuit.
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::CircuitBreaker;
///
/// let breaker = CircuitBreaker::default()
///     .failures(3)
///     .open_for(Duration::from_millis(500), Duration::from_secs(10));
/// # let _ = breaker;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitBreaker {
    failures: u32,
    min_open: Duration,
    max_open: Duration,
}

impl Default for CircuitBreaker {
    /// Opens after 5 consecutive failures; probes after 1 s, backing off up to 30 s.
    fn default() -> Self {
        Self {
            failures: 5,
            min_open: Duration::from_secs(1),
            max_open: Duration::from_secs(30),
        }
    }
}

impl CircuitBreaker {
    /// Consecutive failures that open the circuit (at least 1).
    #[must_use]
    pub fn failures(mut self, failures: u32) -> Self {
        self.failures = failures.max(1);
        self
    }

    /// How long the circuit stays open before the first probe, and the most it backs off to.
    #[must_use]
    pub fn open_for(mut self, min: Duration, max: Duration) -> Self {
        self.min_open = min;
        self.max_open = max.max(min);
        self
    }
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const PROBING: u8 = 2;

/// The breaker's live state. The closed path is one atomic load.
pub(crate) struct Breaker {
    settings: CircuitBreaker,
    state: AtomicU8,
    consecutive_failures: AtomicU64,
    /// While open: when the next probe may go, in µs since `epoch`.
    probe_at: AtomicU64,
    /// The current back-off in µs (doubles while probes fail).
    backoff: AtomicU64,
    epoch: Instant,
    jitter: RandomState,
}

/// Whether a call may go to the store.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Permit {
    Call,
    Probe,
    Refuse,
}

impl Breaker {
    pub(crate) fn new(settings: CircuitBreaker) -> Self {
        Self {
            settings,
            state: AtomicU8::new(CLOSED),
            consecutive_failures: AtomicU64::new(0),
            probe_at: AtomicU64::new(0),
            backoff: AtomicU64::new(micros(settings.min_open)),
            epoch: Instant::now(),
            jitter: RandomState::new(),
        }
    }

    fn now(&self) -> u64 {
        micros(self.epoch.elapsed())
    }

    pub(crate) fn permit(&self) -> Permit {
        match self.state.load(Ordering::Acquire) {
            CLOSED => Permit::Call,
            OPEN if self.now() >= self.probe_at.load(Ordering::Acquire) => {
                // Only the caller that moves OPEN → PROBING sends the probe.
                match self.state.compare_exchange(
                    OPEN,
                    PROBING,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => Permit::Probe,
                    Err(_) => Permit::Refuse,
                }
            }
            _ => Permit::Refuse,
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.state.load(Ordering::Acquire) != CLOSED
    }

    /// Records a call's outcome. Returns true when this call opened the circuit.
    pub(crate) fn record(&self, permit: &Permit, ok: bool) -> bool {
        if ok {
            self.consecutive_failures.store(0, Ordering::Release);
            if *permit == Permit::Probe || self.is_open() {
                self.backoff
                    .store(micros(self.settings.min_open), Ordering::Release);
                self.state.store(CLOSED, Ordering::Release);
            }
            return false;
        }
        match permit {
            Permit::Probe => {
                let doubled = self.backoff.load(Ordering::Acquire).saturating_mul(2);
                self.backoff.store(
                    doubled.min(micros(self.settings.max_open)),
                    Ordering::Release,
                );
                self.open();
                false
            }
            Permit::Call => {
                let failures = self.consecutive_failures.fetch_add(1, Ordering::AcqRel) + 1;
                if failures >= u64::from(self.settings.failures)
                    && self
                        .state
                        .compare_exchange(CLOSED, OPEN, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    self.open();
                    return true;
                }
                false
            }
            Permit::Refuse => false,
        }
    }

    fn open(&self) {
        let backoff = self.backoff.load(Ordering::Acquire);
        // ±20% jitter from a hash of the clock: cheap, and different on every instance.
        let spread = backoff / 5;
        let noise = self.jitter.hash_one(self.now()) % (2 * spread + 1);
        let wait = backoff - spread + noise;
        self.probe_at
            .store(self.now().saturating_add(wait), Ordering::Release);
        self.state.store(OPEN, Ordering::Release);
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("settings", &self.settings)
            .field("open", &self.is_open())
            .finish_non_exhaustive()
    }
}

/// Lets a recurring event be logged at most once per interval, with how many were not.
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
            interval: micros(interval),
            next_at: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// `Some(n)` when this occurrence should be logged, `n` being how many were not since the
    /// last one that was; `None` (and it is counted) otherwise.
    pub(crate) fn should_log(&self) -> Option<u64> {
        let now = micros(self.epoch.elapsed());
        let next_at = self.next_at.load(Ordering::Acquire);
        if now >= next_at
            && self
                .next_at
                .compare_exchange(
                    next_at,
                    now + self.interval,
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
    fn opens_after_consecutive_failures_and_allows_one_probe() {
        let b = Breaker::new(
            CircuitBreaker::default()
                .failures(3)
                .open_for(Duration::ZERO, Duration::ZERO),
        );
        for _ in 0..2 {
            assert_eq!(b.permit(), Permit::Call);
            assert!(!b.record(&Permit::Call, false));
        }
        assert!(b.record(&Permit::Call, false));
        assert!(b.is_open());
        // Back-off 0: the next caller probes, everyone else is refused meanwhile.
        assert_eq!(b.permit(), Permit::Probe);
        assert_eq!(b.permit(), Permit::Refuse);
        b.record(&Permit::Probe, false);
        assert_eq!(b.permit(), Permit::Probe);
        b.record(&Permit::Probe, true);
        assert!(!b.is_open());
        assert_eq!(b.permit(), Permit::Call);
    }

    #[test]
    fn a_success_resets_the_failure_count() {
        let b = Breaker::new(CircuitBreaker::default().failures(2));
        b.record(&Permit::Call, false);
        b.record(&Permit::Call, true);
        b.record(&Permit::Call, false);
        assert!(!b.is_open());
    }

    #[test]
    fn quiet_log_lets_one_through_per_interval_and_counts_the_rest() {
        let log = QuietLog::new(Duration::from_secs(60));
        assert_eq!(log.should_log(), Some(0));
        assert_eq!(log.should_log(), None);
        assert_eq!(log.should_log(), None);
        let every_time = QuietLog::new(Duration::ZERO);
        assert_eq!(every_time.should_log(), Some(0));
        assert_eq!(every_time.should_log(), Some(0));
    }

    #[test]
    fn stays_open_for_the_back_off() {
        let b = Breaker::new(
            CircuitBreaker::default()
                .failures(1)
                .open_for(Duration::from_secs(60), Duration::from_secs(60)),
        );
        b.record(&Permit::Call, false);
        assert_eq!(b.permit(), Permit::Refuse);
    }
}
