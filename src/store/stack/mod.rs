//! The stack the layer's builder puts around every store, outermost first: the cache of
//! denials ([`DenialCache`]), leases for hot keys ([`Leases`]), failure handling
//! ([`Resilient`]: timeout, circuit breaker, fallback), then the [`Backend`]. None of it is
//! public: a user never stacks these, and a store passed to `.store(...)` gets all of them.
//!
//! The stack talks to the store below it through [`Store`] and [`StoreExt`], the crate-private
//! extension of it: what only the built-in stores do natively (stacked decisions in one atomic
//! call, leases, refunds, decisions made at once), with exact defaults for a user's store.

use std::future::Future;
use std::sync::Arc;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::{Store, StoreFailure};

mod backend;
mod breaker;
mod denial_cache;
mod grant;
mod leases;
mod resilient;
#[cfg(test)]
mod user_store;

pub(crate) use backend::Backend;
pub(crate) use breaker::{Breaker, BreakerSettings, Change};
pub(crate) use denial_cache::DenialCache;
pub(crate) use grant::Grant;
pub(crate) use leases::Leases;
pub(crate) use resilient::Resilient;
#[cfg(test)]
pub(crate) use user_store::UserStore;

/// The whole stack over a backend, as the limiter (and the `rls` service) holds it.
pub(crate) type Stack = DenialCache<Leases<Resilient<Backend>>>;

/// How many denials the cache of denials keeps at most (a few MB).
pub(crate) const DENIAL_CACHE_CAPACITY: usize = 100_000;

/// Stacks the cache of denials (`denial_cache` entries at most, 0 for none), leases and the
/// failure handling of `failure` on `backend`.
///
/// The memory store gets no cache of denials: it answers a denied client as fast as the cache
/// would (a lookup under a lock), and the cache would cost every allowed request a clock read.
pub(crate) fn stack(backend: Backend, failure: &StoreFailure, denial_cache: usize) -> Stack {
    let denial_cache = match backend {
        Backend::Memory(_) => 0,
        _ => denial_cache,
    };
    let resilient = Resilient::new(backend).failure(failure);
    DenialCache::new(Leases::new(resilient), denial_cache)
}

impl Stack {
    /// The stack's failure handling, for its error count and circuit state.
    pub(crate) fn resilient(&self) -> &Resilient<Backend> {
        self.get_ref().get_ref()
    }
}

/// Runs its closure when dropped: when the call that holds it ends, finished or cancelled.
/// For local state that must follow a store call either way (a cached denial dropped after a
/// reset that may have reached the store before its caller hung up).
pub(crate) struct OnDrop<F: FnMut()>(pub(crate) F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// One limit of a stacked decision: a client key under a policy, at a cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Check<'a> {
    /// The client key (already sanitized).
    pub(crate) key: &'a str,
    /// The policy to check it against.
    pub(crate) policy: &'a Policy,
    /// The request's cost (≥ 1).
    pub(crate) cost: u32,
    /// Whether a denial by this check blocks the request. Shadow-mode limits are checked and
    /// counted but never block, so their denial must not keep the others from counting.
    pub(crate) blocking: bool,
    /// Whether a denial of this check still records its cost ("charged while over", see
    /// `State::charge`), as Envoy's rate limit service counts every hit. Only `rls` sets it;
    /// the layer's refused requests consume nothing.
    pub(crate) charge: bool,
}

impl<'a> Check<'a> {
    /// A blocking check of `key` under `policy` at `cost`.
    pub(crate) fn new(key: &'a str, policy: &'a Policy, cost: u32) -> Self {
        Self {
            key,
            policy,
            cost,
            blocking: true,
            charge: false,
        }
    }

    /// Whether a denial by this check blocks the request (default true).
    pub(crate) fn blocking(mut self, blocking: bool) -> Self {
        self.blocking = blocking;
        self
    }

    /// Whether a denial of this check still records its cost (default false).
    pub(crate) fn charge(mut self, charge: bool) -> Self {
        self.charge = charge;
        self
    }
}

/// What the stack asks of the store below it beyond [`Store`]. Every method has the default a
/// user's store gets: exact, and no cheaper than one [`check`](Store::check) per request. The
/// built-in stores and the wrappers override them.
pub(crate) trait StoreExt: Store {
    /// Decides one request against several limits at once (stacked limits), all at the same
    /// instant and atomically: if any blocking check is denied, nothing is consumed from any
    /// limit; otherwise every check that was allowed is consumed. A denied check that
    /// charges ([`Check::charge`]) records its cost either way. Returns one decision per
    /// check, in order, each as that limit alone decided it. Two checks of the same key and
    /// policy are decided in order, the second seeing what the first consumed.
    ///
    /// The default checks them one by one, in order, and is not atomic (an earlier limit
    /// counts a request that a later one denies), and charges nothing that is denied.
    fn check_many(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        async move {
            let mut decisions = Vec::with_capacity(checks.len());
            for c in checks {
                decisions.push(self.check(c.key, c.policy, c.cost).await?);
            }
            Ok(decisions)
        }
    }

    /// Gives `n` units back to `key` under `policy`, as far as the algorithm allows:
    ///
    /// - `Gcra`, `LeakyBucket`: the TAT moves back by `n·T`, never before now;
    /// - `TokenBucket`: `n` tokens are added, up to the capacity;
    /// - `FixedWindow`, `FixedWindowFromFirst`, `SlidingWindow`: the count of the current
    ///   window goes down by `n`, not below 0 (earlier windows are left as they are);
    /// - `SlidingWindowLog`: the newest `n` units of the log are removed.
    ///
    /// A blocked client stays blocked, and a client with no state has nothing to get back.
    /// The default is [`StoreError::Unsupported`].
    fn refund(
        &self,
        key: &str,
        policy: &Policy,
        n: u32,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (key, policy, n);
        async { Err(StoreError::Unsupported("refund")) }
    }

    /// Leases from `min` to `max` units (`1 ≤ min ≤ max`) of `key`'s quota under `policy` in
    /// one atomic step, for an instance to spend locally (see [`Leases`]): as many as the
    /// algorithm admits back to back at this instant, consumed as if that many requests had
    /// been allowed; none if fewer than `min` fit, with the denial a request of cost `min`
    /// would get.
    ///
    /// The default decides one request of cost `min` with [`check`](Store::check) and grants
    /// `min` units if it is allowed.
    fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> impl Future<Output = Result<Grant, StoreError>> + Send {
        let _ = max;
        async move {
            let decision = self.check(key, policy, min).await?;
            let granted = if decision.allowed { min } else { 0 };
            Ok(Grant::new(granted, decision, 0))
        }
    }

    /// Gives back up to `unused` units of `grant` (a lease of `key` under `policy`) and
    /// returns how many were taken back: only what the algorithm can take back exactly (see
    /// DESIGN: for the buckets, what is still ahead of now; for the fixed windows, within the
    /// lease's window).
    ///
    /// The default takes nothing back: unused units then count as used, which only ever
    /// admits less.
    fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> impl Future<Output = Result<u32, StoreError>> + Send {
        let _ = (key, policy, unused, grant);
        async { Ok(0) }
    }

    /// The decision for one request of `cost` by `key` under `policy`, when this store can
    /// make it at once, in this process: a `MemoryStore` always can; a [`DenialCache`] can for
    /// a client it holds a denial of, and [`Leases`] from a lease in hand. The layer then
    /// answers without its asynchronous path (no boxed future, nothing to cancel).
    ///
    /// `None` means the store must be asked with [`check`](Store::check); a store that
    /// answers `None` must have changed nothing. The default is `None`, always correct.
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        let _ = (key, policy, cost);
        None
    }

    /// The clock this store decides by, when it reads one in this process (a `MemoryStore`,
    /// or a `RedisStore` given a clock); `None` when its time comes from elsewhere (Redis
    /// `TIME`). Wrappers that keep state bounded in time read it, so that they agree with the
    /// store, `ManualClock`s included. The default is `None`.
    fn clock(&self) -> Option<&dyn Clock> {
        None
    }

    /// Told that a call to this store was given up: it timed out, or its client gave up
    /// after waiting (both count as failures). A store that keeps a connection between calls
    /// drops it here: a connection whose peer went away without a reset (a host gone, a
    /// firewall that forgot it) never fails by itself, and every later call would wait on it.
    /// The default does nothing.
    fn abandoned(&self) {}

    /// The time wrappers keep their state by, in µs: this store's [`clock`](Self::clock)
    /// when it has one here (so a `ManualClock` drives them too), else a monotonic clock of
    /// this process.
    fn now_us(&self) -> u64 {
        match self.clock() {
            Some(clock) => clock.now(),
            None => crate::clock::monotonic_micros(),
        }
    }

    /// The `store` label of this store's metrics: its type's short name by default
    /// (`MemoryStore` → `memory`).
    fn label(&self) -> Arc<str>
    where
        Self: Sized,
    {
        crate::telemetry::store_label::<Self>()
    }
}
