//! Time sources. All limiter time is integer microseconds since the Unix epoch.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time, in microseconds since the Unix epoch.
///
/// [`MemoryStore`](crate::store::MemoryStore) reads its clock on every decision; the Redis
/// store uses the Redis server's `TIME` unless it is given a clock.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Microseconds since the Unix epoch.
    fn now(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to: for deterministic tests of code that uses a limiter.
///
/// Clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_millis(2));
/// assert_eq!(clock.now(), 3_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    micros: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock showing `micros` microseconds since the Unix epoch.
    pub fn new(micros: u64) -> Self {
        Self {
            micros: Arc::new(AtomicU64::new(micros)),
        }
    }

    /// Sets the time, in microseconds since the Unix epoch.
    pub fn set(&self, micros: u64) {
        self.micros.store(micros, Ordering::SeqCst);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
        self.micros.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        self.micros.load(Ordering::SeqCst)
    }
}
