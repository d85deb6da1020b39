//! [`Resilient`]: a store around a store that may fail, with a timeout, a circuit breaker, a
//! local fallback and quiet logs.

use std::collections::HashSet;
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use super::breaker::{Attempt, Breaker, BreakerSettings, Change};
use super::failure::{ErrorHook, OnStoreError, StoreFailure};

mod in_flight;
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quiet_log::QuietLog;
use crate::quota::{Policy, Quota};
use crate::store::check::Check;
use crate::store::contract::{Leasing, QuotaOverrides, StoreExt};
use crate::store::grant::Grant;
use crate::store::memory::MemoryStore;
use crate::store::Store;
use crate::telemetry;

/// `Resilient::reported_open` before the gauge was first set.
const NOT_REPORTED: u8 = 2;

/// A store around `S` that bounds every call by a timeout, stops calling `S` while it keeps
/// failing (a circuit breaker), logs what happens once per change (a failure, at most once
/// per 10 s; the circuit opening; the store answering again), and, with
/// [`OnStoreError::FallbackToMemory`], decides in memory while `S` is away; configured by a
/// [`StoreFailure`]. With the other policies a failure is returned as the [`StoreError`] for the
/// layer to answer (fail open or closed).
///
/// A call that times out may still have run in the store: Redis may run the script after the
/// caller gave up, so a timed-out request may use quota although it was answered by the
/// policy.
///
/// An in-process store answers on the first poll, so wrapping one costs no timer: the timeout
/// starts only when the inner store has to wait.
pub(crate) struct Resilient<S> {
    inner: S,
    timeout: Duration,
    on_error: OnStoreError,
    breaker: Breaker,
    /// Only with [`OnStoreError::FallbackToMemory`].
    fallback: Option<MemoryStore>,
    /// The ids of the slots of requests in flight taken in the fallback while the store was
    /// away: given back there, never renewed in the store.
    fallback_slots: Mutex<HashSet<u64>>,
    errors: AtomicU64,
    /// `errors` when the circuit last opened, to say how many failed while it was open.
    errors_at_open: AtomicU64,
    error_log: QuietLog,
    hook: Option<ErrorHook>,
    /// The `store` label of its metrics.
    label: Arc<str>,
    /// Its key of `tollgate_store_duration_seconds`.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    duration_key: telemetry::DurationKey,
    /// The breaker state last reported to the `tollgate_circuit_open` gauge: 0 closed,
    /// 1 open, [`NOT_REPORTED`] before the first call.
    reported_open: AtomicU8,
}

impl<S: StoreExt> Resilient<S> {
    /// `inner` with the defaults of [`StoreFailure`]: a 50 ms timeout, the default breaker,
    /// and [`OnStoreError::Allow`].
    pub(crate) fn new(inner: S) -> Self {
        let label = inner.label();
        Self {
            inner,
            timeout: Duration::from_millis(50),
            on_error: OnStoreError::Allow,
            breaker: Breaker::new(BreakerSettings::default(), Arc::new(SystemClock)),
            fallback: None,
            fallback_slots: Mutex::default(),
            errors: AtomicU64::new(0),
            errors_at_open: AtomicU64::new(0),
            error_log: QuietLog::new(Duration::from_secs(10)),
            hook: None,
            label,
            duration_key: telemetry::DurationKey::default(),
            reported_open: AtomicU8::new(NOT_REPORTED),
        }
    }

    /// Failure handling as `failure` sets it (timeout, policy, breaker, hook), the breaker's
    /// time read from the system clock.
    pub(crate) fn failure(mut self, failure: &StoreFailure) -> Self {
        self.timeout = failure.timeout;
        self.on_error = failure.on_error;
        self.fallback = (self.on_error == OnStoreError::FallbackToMemory).then(MemoryStore::new);
        self.breaker = breaker(failure, Arc::new(SystemClock));
        self.hook = failure.hook.clone();
        self
    }

    /// The breaker of `failure` reading its time from `clock` (a `ManualClock` in tests).
    #[cfg(test)]
    pub(crate) fn breaker_clock(mut self, failure: &StoreFailure, clock: impl Clock) -> Self {
        self.breaker = breaker(failure, Arc::new(clock));
        self
    }

    /// How many calls failed (errors, timeouts, and calls refused while the circuit was
    /// open) since this store was made.
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Whether the circuit breaker is open: the inner store is failing and not being called.
    pub(crate) fn circuit_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// The wrapped store.
    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Calls the inner store unless the circuit is open, within the timeout, and records
    /// the outcome. If this future is dropped first, the call is given up ([`Call`]).
    ///
    /// The call is made here, by `make`, rather than passed in made: a future passed to an
    /// `async fn` is kept in each future it passes through, and a store's future (a Redis
    /// call) is large enough for that to matter.
    async fn call<T, F>(&self, make: impl FnOnce() -> F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let Some(attempt) = self.breaker.attempt() else {
            self.report_circuit();
            return Err(StoreError::CircuitOpen);
        };
        // Settled below; if this future is dropped first, the call is given up.
        let call = Call {
            resilient: self,
            attempt: Some(attempt),
        };
        #[cfg(feature = "metrics")]
        let started = crate::clock::monotonic_nanos();
        let result = within(self.timeout, make).await;
        #[cfg(feature = "metrics")]
        {
            let nanos = crate::clock::monotonic_nanos().saturating_sub(started);
            (self.duration_key).record(&self.label, nanos as f64 / 1e9);
        }
        if let Err(StoreError::Timeout) = result {
            self.inner.abandoned();
        }
        let reached = result
            .as_ref()
            .map_or_else(|e| !e.is_store_failure(), |_| true);
        match (call.record(reached), &result) {
            // This failure is counted by `failed` next, and is not one made while open.
            (Change::Opened, Err(error)) => {
                self.opened(self.errors.load(Ordering::Relaxed) + 1, error)
            }
            (Change::Closed, _) => {
                let failed = (self.errors.load(Ordering::Relaxed))
                    .saturating_sub(self.errors_at_open.load(Ordering::Relaxed));
                tracing::info!(
                    target: "tollgate",
                    "rate limit store {} answers again, circuit breaker closed ({failed} calls \
                     failed or were not made while it was open)",
                    self.label
                );
            }
            _ => {}
        }
        self.report_circuit();
        result
    }

    /// Logs that the circuit opened because of `why`, with `failed_so_far` calls failed.
    fn opened(&self, failed_so_far: u64, why: &dyn fmt::Display) {
        self.errors_at_open.store(failed_so_far, Ordering::Relaxed);
        tracing::warn!(
            target: "tollgate",
            "rate limit store {} keeps failing, circuit breaker open ({why}); {}, probing the \
             store again after a back-off",
            self.label,
            answering_by(self.on_error)
        );
    }

    /// Sets the `tollgate_circuit_open` gauge when the breaker's state changed since the
    /// last report (and once at the first call).
    fn report_circuit(&self) {
        let open = u8::from(self.breaker.is_open());
        // Read first: most calls change nothing, and need not write a line other cores read.
        if self.reported_open.load(Ordering::Relaxed) != open
            && self.reported_open.swap(open, Ordering::Relaxed) != open
        {
            telemetry::circuit_open(&self.label, open == 1);
        }
    }

    /// Counts, logs (quietly) and reports a failure; then the fallback's answer, if any.
    ///
    /// While the circuit is open nothing is logged: its opening was, and so will its closing
    /// be, so a long outage is two lines, not one every few seconds.
    fn failed(&self, error: &StoreError) -> Option<&MemoryStore> {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if !matches!(error, StoreError::CircuitOpen) && !self.breaker.is_open() {
            if let Some(suppressed) = self.error_log.should_log() {
                tracing::warn!(
                    target: "tollgate",
                    suppressed,
                    "{error} (store {}); {} ({suppressed} more store errors since the last \
                     report)",
                    self.label,
                    answering_by(self.on_error)
                );
            }
        }
        if let Some(hook) = &self.hook {
            hook(error);
        }
        self.fallback.as_ref()
    }

    /// After a call failed with `error` (counted, logged, reported: [`failed`](Self::failed)),
    /// the fallback's `answer`, or the error when there is no fallback.
    fn fall_back<T>(
        &self,
        error: StoreError,
        answer: impl FnOnce(&MemoryStore) -> T,
    ) -> Result<T, StoreError> {
        match self.failed(&error) {
            Some(fallback) => {
                telemetry::fallback_decision();
                Ok(answer(fallback))
            }
            None => Err(error),
        }
    }
}

/// A store call under way: given up (see [`Attempt::give_up`]) if it is dropped before it is
/// settled. A call given up after waiting is counted as failed, and may open the circuit.
struct Call<'a, S: StoreExt> {
    resilient: &'a Resilient<S>,
    attempt: Option<Attempt<'a>>,
}

impl<S: StoreExt> Call<'_, S> {
    /// Settles the call: `reached` when the store answered.
    fn record(mut self, reached: bool) -> Change {
        (self.attempt.take()).map_or(Change::None, |attempt| attempt.record(reached))
    }
}

impl<S: StoreExt> Drop for Call<'_, S> {
    fn drop(&mut self) {
        let Some(attempt) = self.attempt.take() else {
            return;
        };
        let resilient = self.resilient;
        let Some(change) = attempt.give_up() else {
            return;
        };
        resilient.inner.abandoned();
        let failed_so_far = resilient.errors.fetch_add(1, Ordering::Relaxed) + 1;
        if change == Change::Opened {
            resilient.opened(failed_so_far, &"its calls were given up by their clients");
        }
        resilient.report_circuit();
    }
}

/// The breaker of `failure`'s settings, for calls bounded by its timeout, reading `clock`.
fn breaker(failure: &StoreFailure, clock: Arc<dyn Clock>) -> Breaker {
    Breaker::new(failure.breaker.for_timeout(failure.timeout), clock)
}

/// What the layer does meanwhile, in a log line.
fn answering_by(on_error: OnStoreError) -> &'static str {
    match on_error {
        OnStoreError::Allow => "letting requests through unlimited (on_store_error allow)",
        OnStoreError::Deny => "denying requests with 503 (on_store_error deny)",
        OnStoreError::FallbackToMemory => {
            "failing over to the in-memory limiter of each instance (on_store_error fallback)"
        }
    }
}

/// The result of the call `make` makes, or [`StoreError::Timeout`] after `limit`. A call that
/// is ready at once (an in-process store) costs no timer, and no room for one: the timer is
/// boxed, so every decision's future stays small.
async fn within<T, F>(limit: Duration, make: impl FnOnce() -> F) -> Result<T, StoreError>
where
    F: Future<Output = Result<T, StoreError>>,
{
    let mut call = pin!(make());
    if let Poll::Ready(result) = poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await {
        return result;
    }
    Box::pin(tokio::time::timeout(limit, call))
        .await
        .unwrap_or(Err(StoreError::Timeout))
}

impl<S: StoreExt> Store for Resilient<S> {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        (self.call(|| self.inner.check(key, policy, cost)).await)
            .or_else(|error| self.fall_back(error, |f| f.check_now(key, policy, cost)))
    }

    /// As [`check`](Self::check): within the timeout, not while the circuit is open, and
    /// with the fallback's peek while the store is away.
    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        (self.call(|| self.inner.peek(key, policy, cost)).await)
            .or_else(|error| self.fall_back(error, |f| f.peek_now(key, policy, cost)))
    }

    /// Resets the fallback's state too, so that it holds no stale denial for the next outage;
    /// the inner store's error, if any, is returned (within the timeout, through the breaker).
    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        if let Some(fallback) = &self.fallback {
            fallback.reset(key, policy).await?;
        }
        self.call(|| self.inner.reset(key, policy)).await
    }

    /// Blocks in the fallback too, so that the block holds through an outage on this
    /// instance.
    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        if let Some(fallback) = &self.fallback {
            fallback.block(key, policy, duration).await?;
        }
        self.call(|| self.inner.block(key, policy, duration)).await
    }
}

impl<S: StoreExt> StoreExt for Resilient<S> {
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        (self.call(|| self.inner.check_many(checks)).await)
            .or_else(|error| self.fall_back(error, |f| f.check_many_now(checks)))
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.inner.clock()
    }

    /// The inner store's decision at once, while the circuit is closed (an open circuit, its
    /// probe and the fallback are [`check`](Self::check)'s). Not timed: it takes well under a
    /// microsecond, and `tollgate_store_duration_seconds` is for calls that wait.
    #[inline]
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        if self.breaker.is_open() {
            return None;
        }
        // Returned as the inner store made it: unwrapping and wrapping it again would copy it.
        let decision = self.inner.check_ready(key, policy, cost);
        if decision.is_some() {
            self.report_circuit();
        }
        decision
    }

    /// As [`check_ready`](Self::check_ready), for [`check_many`](Self::check_many).
    #[inline]
    fn check_many_ready(&self, checks: &[Check<'_>]) -> Option<Vec<Decision>> {
        if self.breaker.is_open() {
            return None;
        }
        let decisions = self.inner.check_many_ready(checks);
        if decisions.is_some() {
            self.report_circuit();
        }
        decisions
    }

    /// Refunds the fallback too (what it counted during an outage).
    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        if let Some(fallback) = &self.fallback {
            fallback.refund(key, policy, n).await?;
        }
        self.call(|| self.inner.refund(key, policy, n)).await
    }

    /// Passed on: this wrapper gives calls up itself, and tells the inner store then.
    fn abandoned(&self) {
        self.inner.abandoned();
    }

    /// The inner store's label, taken when it was wrapped.
    fn label(&self) -> Arc<str> {
        Arc::clone(&self.label)
    }
}

impl<S: Leasing> Leasing for Resilient<S> {
    /// Leases through the timeout and breaker; on failure, by the policy like a check (the
    /// fallback's grants carry no mark, so that nothing of them is ever given back to the
    /// inner store).
    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        (self
            .call(|| self.inner.acquire(key, policy, min, max))
            .await)
            .or_else(|error| {
                self.fall_back(error, |f| {
                    let grant = f.acquire_now(key, policy, min, max);
                    Grant::new(grant.granted, grant.decision, 0)
                })
            })
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        let released = self
            .call(|| self.inner.release(key, policy, unused, grant))
            .await;
        if let Err(error) = &released {
            self.failed(error);
        }
        released
    }
}

/// Within the timeout and through the breaker, as decisions are; a failure is counted and
/// logged as theirs are, and returned (no fallback keeps overrides).
impl<S: QuotaOverrides> QuotaOverrides for Resilient<S> {
    async fn quota_override(&self, rule: &str, key: &str) -> Result<Option<Quota>, StoreError> {
        let read = self.call(|| self.inner.quota_override(rule, key)).await;
        if let Err(error) = &read {
            self.failed(error);
        }
        read
    }

    async fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let set = (self.call(|| self.inner.set_quota_override(rule, key, quota, ttl))).await;
        if let Err(error) = &set {
            self.failed(error);
        }
        set
    }
}

impl<S: fmt::Debug> fmt::Debug for Resilient<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resilient")
            .field("inner", &self.inner)
            .field("timeout", &self.timeout)
            .field("on_error", &self.on_error)
            .field("breaker", &self.breaker)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU8;

    use super::*;
    use crate::clock::ManualClock;
    use crate::store::wrappers::user_store::{check_in_order, lease_by_check};
    use crate::store::wrappers::Backend;
    use crate::{Algorithm, Quota};

    const ANSWER: u8 = 0;
    const FAIL: u8 = 1;
    const HANG: u8 = 2;

    /// A store that answers, fails or hangs as told (a stand-in for a backend in unit tests;
    /// the integration tests use a real, SIGSTOPped redis-server).
    #[derive(Debug, Default)]
    struct Flaky {
        mode: AtomicU8,
        memory: MemoryStore,
        /// How many calls it was told were given up.
        abandoned: AtomicU64,
    }

    impl Flaky {
        fn set(&self, mode: u8) {
            self.mode.store(mode, Ordering::SeqCst);
        }
    }

    impl Store for Flaky {
        async fn check(
            &self,
            key: &str,
            policy: &Policy,
            cost: u32,
        ) -> Result<Decision, StoreError> {
            match self.mode.load(Ordering::SeqCst) {
                FAIL => Err(StoreError::backend("connection refused")),
                HANG => std::future::pending().await,
                _ => Ok(self.memory.check_now(key, policy, cost)),
            }
        }

        async fn peek(
            &self,
            key: &str,
            policy: &Policy,
            cost: u32,
        ) -> Result<Decision, StoreError> {
            self.memory.peek(key, policy, cost).await
        }

        async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
            self.memory.reset(key, policy).await
        }

        async fn block(
            &self,
            key: &str,
            policy: &Policy,
            for_: Duration,
        ) -> Result<(), StoreError> {
            self.memory.block(key, policy, for_).await
        }
    }

    impl StoreExt for Flaky {
        /// Decides at once while answering, as an in-process store does.
        fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
            let answering = self.mode.load(Ordering::SeqCst) == ANSWER;
            answering.then(|| self.memory.check_now(key, policy, cost))
        }

        fn check_many_ready(&self, _: &[Check<'_>]) -> Option<Vec<Decision>> {
            None
        }

        fn abandoned(&self) {
            self.abandoned.fetch_add(1, Ordering::SeqCst);
        }

        async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
            check_in_order(self, checks).await
        }

        async fn refund(&self, _: &str, _: &Policy, _: u32) -> Result<(), StoreError> {
            Err(StoreError::Unsupported("refund"))
        }

        fn clock(&self) -> Option<&dyn Clock> {
            None
        }

        fn label(&self) -> Arc<str> {
            "flaky".into()
        }
    }

    impl Leasing for Flaky {
        async fn acquire(
            &self,
            key: &str,
            policy: &Policy,
            min: u32,
            _: u32,
        ) -> Result<Grant, StoreError> {
            lease_by_check(self, key, policy, min).await
        }

        async fn release(&self, _: &str, _: &Policy, _: u32, _: &Grant) -> Result<u32, StoreError> {
            Ok(0)
        }
    }

    fn policy() -> Policy {
        Policy::new("p", Quota::per_second(100).unwrap(), Algorithm::Gcra).unwrap()
    }

    /// A store that denies on errors, whose circuit opens at the first failure and stays open
    /// for 1 s (by `clock`) before a probe.
    fn tripping_on_one_failure(clock: &ManualClock, timeout: Duration) -> Resilient<Flaky> {
        let failure = StoreFailure::new(OnStoreError::Deny)
            .timeout(timeout)
            .open_after(1)
            .open_for(Duration::from_secs(1), Duration::from_secs(30));
        Resilient::new(Flaky::default())
            .failure(&failure)
            .breaker_clock(&failure, clock.clone())
    }

    #[tokio::test]
    async fn a_request_dropped_mid_probe_does_not_keep_the_circuit_open() {
        let clock = ManualClock::new(1_000_000);
        let store = tripping_on_one_failure(&clock, Duration::from_secs(60));
        let policy = policy();
        store.get_ref().set(FAIL);
        assert!(store.check("k", &policy, 1).await.is_err());
        assert!(store.circuit_open());
        clock.advance(Duration::from_secs(2));
        // The probe's request is dropped before the store answers.
        store.get_ref().set(HANG);
        let probe = store.check("k", &policy, 1);
        let dropped = tokio::time::timeout(Duration::from_millis(1), probe).await;
        assert!(dropped.is_err(), "the probe hangs: {dropped:?}");
        // The store is back: the very next request probes, and closes the circuit.
        store.get_ref().set(ANSWER);
        assert!(store.check("k", &policy, 1).await.unwrap().allowed);
        assert!(!store.circuit_open());
    }

    /// The store is told of a call that timed out, or that its client gave up on after
    /// waiting (so a Redis store drops a connection that may hang); not of a call that failed
    /// (its own error says what broke), nor of one given up at once.
    #[tokio::test]
    async fn calls_that_timed_out_or_were_given_up_after_waiting_are_abandoned() {
        let clock = ManualClock::new(1_000_000);
        let failure = StoreFailure::new(OnStoreError::Allow)
            .timeout(Duration::from_millis(20))
            .open_after(100);
        let store = Resilient::new(Flaky::default())
            .failure(&failure)
            .breaker_clock(&failure, clock.clone());
        let policy = policy();
        let abandoned = || store.get_ref().abandoned.load(Ordering::SeqCst);
        store.get_ref().set(FAIL);
        assert!(store.check("k", &policy, 1).await.is_err());
        assert_eq!(abandoned(), 0, "failed");
        store.get_ref().set(HANG);
        let timed_out = store.check("k", &policy, 1).await;
        assert!(
            matches!(timed_out, Err(StoreError::Timeout)),
            "{timed_out:?}"
        );
        assert_eq!(abandoned(), 1, "timed out");
        // Given up (dropped) after the breaker's clock moved by `waited`.
        for (waited, expected) in [(Duration::ZERO, 1), (Duration::from_millis(15), 2)] {
            let mut call = Box::pin(store.check("k", &policy, 1));
            let polled = tokio::time::timeout(Duration::from_millis(1), &mut call).await;
            assert!(polled.is_err(), "hangs");
            clock.advance(waited);
            drop(call);
            assert_eq!(abandoned(), expected, "given up after {waited:?}");
        }
    }

    #[tokio::test]
    async fn nothing_is_decided_at_once_while_the_circuit_is_open() {
        let clock = ManualClock::new(1_000_000);
        let store = tripping_on_one_failure(&clock, Duration::from_millis(50));
        let policy = policy();
        assert!(store
            .check_ready("k", &policy, 1)
            .is_some_and(|d| d.allowed));
        store.get_ref().set(FAIL);
        assert!(store.check("k", &policy, 1).await.is_err());
        // The store answers again, but the circuit is open: only `check` may probe it.
        store.get_ref().set(ANSWER);
        assert!(store.check_ready("k", &policy, 1).is_none());
        clock.advance(Duration::from_secs(2));
        assert!(store.check_ready("k", &policy, 1).is_none());
        assert!(store.check("k", &policy, 1).await.unwrap().allowed);
        assert!(store.check_ready("k", &policy, 1).is_some());
    }

    #[tokio::test]
    async fn fallback_decides_in_memory_and_counts_the_error() {
        let store = Resilient::new(Flaky::default()).failure(
            &StoreFailure::new(OnStoreError::FallbackToMemory).timeout(Duration::from_millis(5)),
        );
        store.get_ref().set(HANG);
        let policy = Policy::new("p", Quota::per_minute(2).unwrap(), Algorithm::Gcra).unwrap();
        let mut allowed = Vec::new();
        for _ in 0..3 {
            allowed.push(store.check("k", &policy, 1).await.unwrap().allowed);
        }
        assert_eq!(allowed, [true, true, false]);
        assert_eq!(store.errors(), 3);
    }

    #[tokio::test]
    async fn an_error_about_one_key_never_opens_the_circuit() {
        #[derive(Debug)]
        struct WrongType;
        impl Store for WrongType {
            async fn check(&self, _: &str, _: &Policy, _: u32) -> Result<Decision, StoreError> {
                Err(StoreError::key_state("WRONGTYPE"))
            }
            async fn peek(&self, _: &str, _: &Policy, _: u32) -> Result<Decision, StoreError> {
                Err(StoreError::key_state("WRONGTYPE"))
            }
            async fn reset(&self, _: &str, _: &Policy) -> Result<(), StoreError> {
                Err(StoreError::key_state("WRONGTYPE"))
            }
            async fn block(&self, _: &str, _: &Policy, _: Duration) -> Result<(), StoreError> {
                Err(StoreError::key_state("WRONGTYPE"))
            }
        }
        let store =
            Resilient::new(Backend::of(WrongType)).failure(&StoreFailure::default().open_after(1));
        for _ in 0..10 {
            assert!(matches!(
                store.check("k", &policy(), 1).await,
                Err(StoreError::KeyState(_))
            ));
        }
        assert!(!store.circuit_open());
        assert_eq!(store.errors(), 10);
    }

    #[test]
    fn a_store_that_answers_at_once_needs_no_timer() {
        // No tokio time driver here: a timer would panic, so none is made.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let store = Resilient::new(MemoryStore::new());
        let decision = runtime.block_on(store.check("k", &policy(), 1)).unwrap();
        assert!(decision.allowed);
    }
}
