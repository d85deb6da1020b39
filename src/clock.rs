//! Time sources. All limiter time is integer microseconds since the Unix epoch.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
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
///
/// Read through the CPU's time-stamp counter (with [`quanta`](https://docs.rs/quanta), where the
/// counter is invariant; else the OS's monotonic clock), which costs a few nanoseconds where
/// `SystemTime::now` costs tens, and anchored to `SystemTime` every 100 ms: between anchors it
/// moves as the counter does, so it follows the wall clock to within the counter's drift over
/// 100 ms (microseconds), and a step of the wall clock (NTP, by hand) within 100 ms. The first
/// read in a process calibrates the counter (up to 200 ms); `MemoryStore::new` makes it.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        COUNTER.now()
    }
}

/// The counter every clock of this process reads.
static COUNTER: LazyLock<Anchored> = LazyLock::new(Anchored::new);

/// Nanoseconds since this process first read a clock here: monotonic, and as cheap as
/// [`SystemClock`] (no wall clock in it). For timing, and for caches that need no wall time.
pub(crate) fn monotonic_nanos() -> u64 {
    COUNTER.counted_nanos()
}

/// [`monotonic_nanos`] in µs.
pub(crate) fn monotonic_micros() -> u64 {
    monotonic_nanos() / 1_000
}

/// How often (µs of the counter) the counter is anchored to the wall clock again.
const ANCHOR_EVERY_US: u64 = 100_000;

/// Ticks of the counter over which [`Anchored::micros_per_tick`] is read from its calibration:
/// about seven minutes of a 2.6 GHz counter, so that reading it rounds by a few parts in 10^12.
const RATE_TICKS: u64 = 1 << 40;

/// The counter, and the wall clock's time at its last anchoring.
struct Anchored {
    counter: quanta::Clock,
    /// The counter's raw reading at start: times are µs since.
    start: u64,
    /// µs per tick of the counter, as a fraction of 2^64: `ticks × micros_per_tick >> 64` µs.
    /// The counter's own conversion goes through nanoseconds and then divides by 1,000; this
    /// is one multiplication, on the path of every decision.
    micros_per_tick: u64,
    /// The wall clock's µs minus the counter's, at the last anchoring (wrapping).
    offset: AtomicU64,
    /// The counter's µs from which the next read anchors again.
    next_anchor: AtomicU64,
}

impl Anchored {
    fn new() -> Self {
        let counter = quanta::Clock::new();
        let start = counter.raw();
        // The counter's calibrated rate, read back through its own conversion.
        let nanos = counter.delta_as_nanos(0, RATE_TICKS);
        let per_tick = (u128::from(nanos) << 64) / (u128::from(RATE_TICKS) * 1_000);
        let anchored = Self {
            counter,
            start,
            micros_per_tick: u64::try_from(per_tick).unwrap_or(u64::MAX),
            offset: AtomicU64::new(0),
            next_anchor: AtomicU64::new(0),
        };
        anchored.anchor(0);
        anchored
    }

    fn counted_nanos(&self) -> u64 {
        self.counter.delta_as_nanos(self.start, self.counter.raw())
    }

    /// µs counted since start.
    #[inline]
    fn counted_micros(&self) -> u64 {
        let ticks = self.counter.raw().saturating_sub(self.start);
        ((u128::from(ticks) * u128::from(self.micros_per_tick)) >> 64) as u64
    }

    fn now(&self) -> u64 {
        let counted = self.counted_micros();
        if counted >= self.next_anchor.load(Ordering::Relaxed) {
            return self.anchor(counted);
        }
        counted.wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// Reads the wall clock, and counts from it.
    #[cold]
    fn anchor(&self, counted: u64) -> u64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.offset
            .store(wall.wrapping_sub(counted), Ordering::Relaxed);
        self.next_anchor
            .store(counted.saturating_add(ANCHOR_EVERY_US), Ordering::Relaxed);
        wall
    }
}

/// A clock that moves only when told to: for deterministic tests of code that uses a limiter.
///
/// Clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use tollgate::clock::{Clock, ManualClock};
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

#[cfg(test)]
mod tests {
    use super::*;

    fn system_micros() -> u64 {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        u64::try_from(since.as_micros()).unwrap()
    }

    #[test]
    fn the_system_clock_follows_the_wall_clock() {
        SystemClock.now();
        let start = std::time::Instant::now();
        // Across several anchorings (every 100 ms), each read lies between two reads of
        // `SystemTime`, but for a millisecond of drift.
        while start.elapsed() < Duration::from_millis(350) {
            let before = system_micros();
            let now = SystemClock.now();
            let after = system_micros();
            assert!(
                before - 1_000 <= now && now <= after + 1_000,
                "{before} <= {now} <= {after}"
            );
            std::thread::sleep(Duration::from_micros(300));
        }
    }
}
