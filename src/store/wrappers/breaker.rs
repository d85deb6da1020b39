//! The circuit breaker: stops calling a failing store, and probes it again after a back-off.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;

/// Settings of the circuit breaker that stops calling a failing store (set through
/// [`StoreFailure`](crate::store::StoreFailure)).
///
/// After `failures` consecutive failures the circuit opens: decisions are answered by the
/// [`OnStoreError`](crate::store::OnStoreError) policy at once, with no call and no timeout. After a
/// back-off (starting at `min_open`, doubling up to `max_open` while probes fail, with ±20%
/// jitter so instances do not probe in step) one request probes the store; success closes the
/// circuit.
///
/// Failures are counted per incident, not per call: the calls in flight when a failure is
/// seen (e.g. every call on one connection that broke) fail together and count once; the
/// next failure counts only for a call started after it. So one dropped connection is one
/// failure, not as many as were in flight.
///
/// A call its caller gave up on (a client that hung up, a gRPC deadline) after waiting at
/// least `given_up_after` fails too: with deadlines shorter than the store's timeout, a hung
/// store would otherwise never fail a call, and every request would wait out its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BreakerSettings {
    failures: u32,
    min_open: Duration,
    max_open: Duration,
    given_up_after: Duration,
}

impl Default for BreakerSettings {
    /// Opens after 5 consecutive failures; probes after 1 s, backing off up to 30 s; a call
    /// given up after 10 ms is a failure.
    fn default() -> Self {
        Self {
            failures: 5,
            min_open: Duration::from_secs(1),
            max_open: Duration::from_secs(30),
            given_up_after: Duration::from_millis(10),
        }
    }
}

impl BreakerSettings {
    /// Consecutive failures that open the circuit (at least 1).
    #[must_use]
    pub(crate) fn failures(mut self, failures: u32) -> Self {
        self.failures = failures.max(1);
        self
    }

    /// How long the circuit stays open before the first probe, and the most it backs off to.
    #[must_use]
    pub(crate) fn open_for(mut self, min: Duration, max: Duration) -> Self {
        self.min_open = min;
        self.max_open = max.max(min);
        self
    }

    /// For calls bounded by `timeout`: a call given up on after half of it is a failure, if
    /// that is sooner than `given_up_after` (a store that answers in time answers well within
    /// either).
    #[must_use]
    pub(crate) fn for_timeout(mut self, timeout: Duration) -> Self {
        self.given_up_after = self.given_up_after.min(timeout / 2);
        self
    }
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const PROBING: u8 = 2;

/// The breaker's live state. The closed path is two atomic loads.
pub(crate) struct Breaker {
    settings: BreakerSettings,
    clock: Arc<dyn Clock>,
    state: AtomicU8,
    consecutive_failures: AtomicU64,
    /// Moves on at every counted failure: a call that started in an earlier incident fails
    /// with it and is not counted again.
    incident: AtomicU64,
    /// While open: when the next probe may go, in the clock's µs.
    probe_at: AtomicU64,
    /// The current back-off in µs (doubles while probes fail).
    backoff: AtomicU64,
    jitter: RandomState,
}

/// What settling a call did to the circuit: each change is reported to exactly one caller,
/// so it is logged once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Open, closed or probing as before.
    None,
    /// This failure opened the circuit.
    Opened,
    /// This success closed the circuit (a probe, or a call begun before it opened).
    Closed,
}

/// Leave to call the store, taken before the call and settled by [`record`](Self::record), or
/// by [`give_up`](Self::give_up) when its caller gave up on it.
///
/// Dropping it unsettled gives it up too: the breaker is never left waiting for an answer that
/// will not come.
#[must_use]
pub(crate) struct Attempt<'a> {
    breaker: &'a Breaker,
    probe: bool,
    incident: u64,
    /// When the call began, in the clock's µs.
    started: u64,
    settled: bool,
}

impl Breaker {
    pub(crate) fn new(settings: BreakerSettings, clock: Arc<dyn Clock>) -> Self {
        Self {
            settings,
            clock,
            state: AtomicU8::new(CLOSED),
            consecutive_failures: AtomicU64::new(0),
            incident: AtomicU64::new(0),
            probe_at: AtomicU64::new(0),
            backoff: AtomicU64::new(micros(settings.min_open)),
            jitter: RandomState::new(),
        }
    }

    /// Leave to call the store, or `None` while the circuit is open.
    pub(crate) fn attempt(&self) -> Option<Attempt<'_>> {
        let probe = match self.state.load(Ordering::Acquire) {
            CLOSED => false,
            // Only the caller that moves OPEN → PROBING sends the probe.
            OPEN if self.clock.now() >= self.probe_at.load(Ordering::Acquire)
                && self
                    .state
                    .compare_exchange(OPEN, PROBING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok() =>
            {
                true
            }
            _ => return None,
        };
        Some(Attempt {
            breaker: self,
            probe,
            incident: self.incident.load(Ordering::Acquire),
            started: self.clock.now(),
            settled: false,
        })
    }

    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.state.load(Ordering::Acquire) != CLOSED
    }

    /// Returns true when this success closed the circuit.
    fn succeeded(&self) -> bool {
        // Written only when there is something to reset: a write on every request would move
        // this cache line between the cores serving requests.
        if self.consecutive_failures.load(Ordering::Acquire) != 0 {
            self.consecutive_failures.store(0, Ordering::Release);
        }
        if self.is_open() {
            self.backoff
                .store(micros(self.settings.min_open), Ordering::Release);
            // Only the caller that moves it to CLOSED is told.
            return self.state.swap(CLOSED, Ordering::AcqRel) != CLOSED;
        }
        false
    }

    /// Returns true when this failure opened the circuit.
    fn failed(&self, attempt: &Attempt<'_>) -> bool {
        if attempt.probe {
            let doubled = self.backoff.load(Ordering::Acquire).saturating_mul(2);
            self.backoff.store(
                doubled.min(micros(self.settings.max_open)),
                Ordering::Release,
            );
            self.reopen_after_probe(self.backoff.load(Ordering::Acquire));
            return false;
        }
        // Counted once per incident: the first of the calls started before it moves it on.
        let counted = self
            .incident
            .compare_exchange(
                attempt.incident,
                attempt.incident.wrapping_add(1),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if !counted {
            return false;
        }
        let failures = self.consecutive_failures.fetch_add(1, Ordering::AcqRel) + 1;
        if failures >= u64::from(self.settings.failures)
            && self
                .state
                .compare_exchange(CLOSED, OPEN, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.schedule_probe(self.backoff.load(Ordering::Acquire));
            return true;
        }
        false
    }

    /// Opens the circuit again after a probe that failed or was abandoned, until `backoff` µs
    /// from now; not if an ordinary call's success closed it meanwhile.
    fn reopen_after_probe(&self, backoff: u64) {
        self.schedule_probe(backoff);
        let _ = (self.state).compare_exchange(PROBING, OPEN, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Sets the time of the next probe to `backoff` µs (±20% jitter) from now.
    fn schedule_probe(&self, backoff: u64) {
        let now = self.clock.now();
        // ±20% jitter from a hash of the clock: cheap, and different on every instance.
        let spread = backoff / 5;
        let noise = self.jitter.hash_one(now) % (2 * spread + 1);
        // Saturating: a back-off as long as `Duration::MAX` stays as long, not wrapped.
        let wait = (backoff - spread).saturating_add(noise);
        self.probe_at
            .store(now.saturating_add(wait), Ordering::Release);
    }
}

impl Attempt<'_> {
    /// Records the call's outcome: `ok` when the store answered (even with an error about
    /// one key's state). Returns what it did to the circuit.
    pub(crate) fn record(mut self, ok: bool) -> Change {
        self.settled = true;
        let changed = if ok {
            self.breaker.succeeded()
        } else {
            self.breaker.failed(&self)
        };
        match (changed, ok) {
            (false, _) => Change::None,
            (true, false) => Change::Opened,
            (true, true) => Change::Closed,
        }
    }

    /// Settles a call its caller gave up on (the request's future was dropped mid-call). A
    /// probe is handed back: the circuit opens again with no wait, so the next request probes.
    /// An ordinary call that had waited `given_up_after` fails; one given up sooner changes
    /// nothing. `None`: not a failure.
    pub(crate) fn give_up(mut self) -> Option<Change> {
        self.give_up_in_place()
    }

    fn give_up_in_place(&mut self) -> Option<Change> {
        self.settled = true;
        if self.probe {
            self.breaker.reopen_after_probe(0);
            return None;
        }
        let waited = self.breaker.clock.now().saturating_sub(self.started);
        if waited < micros(self.breaker.settings.given_up_after) {
            return None;
        }
        Some(match self.breaker.failed(self) {
            true => Change::Opened,
            false => Change::None,
        })
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.settled {
            let _ = self.give_up_in_place();
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn breaker(settings: BreakerSettings) -> (Breaker, ManualClock) {
        let clock = ManualClock::new(1_000_000);
        (Breaker::new(settings, Arc::new(clock.clone())), clock)
    }

    /// Whether one failed call opened the circuit.
    fn fail_once(b: &Breaker) -> bool {
        b.attempt().expect("closed").record(false) == Change::Opened
    }

    #[test]
    fn opens_after_consecutive_failures_and_allows_one_probe() {
        let (b, _) = breaker(
            BreakerSettings::default()
                .failures(3)
                .open_for(Duration::ZERO, Duration::ZERO),
        );
        assert!(!fail_once(&b));
        assert!(!fail_once(&b));
        assert!(fail_once(&b));
        assert!(b.is_open());
        // Back-off 0: the next caller probes, everyone else is refused meanwhile.
        let probe = b.attempt().expect("probe");
        assert!(probe.probe);
        assert!(b.attempt().is_none());
        assert_eq!(probe.record(false), Change::None);
        let probe = b.attempt().expect("probe again");
        assert_eq!(probe.record(true), Change::Closed);
        assert!(!b.is_open());
        assert!(!b.attempt().expect("closed").probe);
        assert_eq!(b.attempt().unwrap().record(true), Change::None);
    }

    #[test]
    fn a_back_off_as_long_as_duration_max_keeps_the_circuit_open() {
        let (b, clock) = breaker(
            BreakerSettings::default()
                .failures(1)
                .open_for(Duration::MAX, Duration::MAX),
        );
        assert!(fail_once(&b));
        clock.advance(Duration::from_secs(365 * 24 * 3600));
        assert!(b.attempt().is_none());
    }

    #[test]
    fn a_probe_failed_or_dropped_after_a_success_closed_the_circuit_leaves_it_closed() {
        let (b, _) = breaker(
            BreakerSettings::default()
                .failures(1)
                .open_for(Duration::ZERO, Duration::ZERO),
        );
        // Started while closed, answered while the probe is out.
        let (early, later) = (b.attempt().unwrap(), b.attempt().unwrap());
        assert!(fail_once(&b));
        let probe = b.attempt().expect("probe");
        assert_eq!(early.record(true), Change::Closed);
        drop(probe);
        assert!(!b.is_open());
        assert!(fail_once(&b));
        let probe = b.attempt().expect("probe");
        assert_eq!(later.record(true), Change::Closed);
        assert_eq!(probe.record(false), Change::None);
        assert!(!b.is_open());
    }

    #[test]
    fn a_success_resets_the_failure_count() {
        let (b, _) = breaker(BreakerSettings::default().failures(2));
        fail_once(&b);
        b.attempt().unwrap().record(true);
        fail_once(&b);
        assert!(!b.is_open());
    }

    #[test]
    fn stays_open_for_the_back_off_read_from_the_clock() {
        let (b, clock) = breaker(
            BreakerSettings::default()
                .failures(1)
                .open_for(Duration::from_secs(10), Duration::from_secs(60)),
        );
        fail_once(&b);
        assert!(b.attempt().is_none());
        // 10 s ± 20%: still closed to calls at 7.9 s, probing by 12.1 s.
        clock.advance(Duration::from_millis(7_900));
        assert!(b.attempt().is_none());
        clock.advance(Duration::from_millis(4_200));
        let probe = b.attempt().expect("probe after the back-off");
        // A failed probe doubles the back-off: nothing at 15.9 s, a probe by 24.1 s.
        probe.record(false);
        clock.advance(Duration::from_millis(15_900));
        assert!(b.attempt().is_none());
        clock.advance(Duration::from_millis(8_200));
        assert!(b.attempt().expect("second probe").probe);
    }

    #[test]
    fn a_dropped_probe_lets_the_next_request_probe() {
        let (b, clock) = breaker(
            BreakerSettings::default()
                .failures(1)
                .open_for(Duration::from_secs(1), Duration::from_secs(30)),
        );
        fail_once(&b);
        clock.advance(Duration::from_secs(2));
        let probe = b.attempt().expect("probe");
        // The request's future is dropped mid-call (client hung up, deadline passed).
        drop(probe);
        let next = b.attempt().expect("the next request probes at once");
        assert!(next.probe);
        next.record(true);
        assert!(!b.is_open());
    }

    #[test]
    fn calls_in_flight_together_fail_as_one() {
        let (b, _) = breaker(BreakerSettings::default().failures(2));
        // 100 calls on one connection that breaks: one failure, not 100.
        let in_flight: Vec<Attempt<'_>> = (0..100).map(|_| b.attempt().unwrap()).collect();
        for attempt in in_flight {
            assert_eq!(attempt.record(false), Change::None);
        }
        assert!(!b.is_open());
        // A call started after that failure counts: the second failure opens the circuit.
        assert!(fail_once(&b));
        assert!(b.is_open());
    }

    #[test]
    fn an_ordinary_call_given_up_soon_changes_nothing() {
        let (b, clock) = breaker(BreakerSettings::default().failures(1));
        let call = b.attempt().unwrap();
        clock.advance(Duration::from_millis(9));
        assert_eq!(call.give_up(), None);
        drop(b.attempt().unwrap());
        assert!(!b.is_open());
        assert!(b.attempt().is_some());
    }

    #[test]
    fn an_ordinary_call_given_up_after_waiting_is_a_failure() {
        let (b, clock) = breaker(BreakerSettings::default().failures(2));
        let call = b.attempt().unwrap();
        clock.advance(Duration::from_millis(10));
        assert_eq!(call.give_up(), Some(Change::None));
        assert!(!b.is_open());
        // Dropped unsettled, it is given up the same way: the second failure opens.
        let call = b.attempt().unwrap();
        clock.advance(Duration::from_millis(30));
        drop(call);
        assert!(b.is_open());
    }

    #[test]
    fn calls_given_up_together_are_one_failure() {
        let (b, clock) = breaker(BreakerSettings::default().failures(2));
        let (one, two) = (b.attempt().unwrap(), b.attempt().unwrap());
        clock.advance(Duration::from_millis(20));
        assert_eq!(one.give_up(), Some(Change::None));
        assert_eq!(two.give_up(), Some(Change::None));
        assert!(!b.is_open());
        let three = b.attempt().unwrap();
        clock.advance(Duration::from_millis(20));
        assert_eq!(three.give_up(), Some(Change::Opened));
    }
}
