//! [`StoreExt`], [`Leasing`], [`QuotaOverrides`] and [`InFlightSlots`]: the crate-private
//! contract between the stores and what sits on them.
//!
//! A [`Store`] (the public four methods) is what a user writes. The built-in stores
//! (`MemoryStore`, `RedisStore`), the adapter that gives a user's store its fallbacks
//! (`wrappers::UserStore`), and every wrapper (cache of denials, leases, failure handling, the
//! backend's dispatch) implement [`StoreExt`] as well; [`Leasing`] (leases of units and their
//! return), only the stores and what lies between them and the leases. It has no default methods: a wrapper
//! that forgets to pass a call on does not compile, and a fallback is a choice made once, in
//! the user-store adapter.
//!
//! This file is the bottom of `store/`: it imports no store, and the stores import it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::{InFlight, Policy, Quota};
use crate::store::check::Check;
use crate::store::grant::Grant;
use crate::store::slot::HeldSlot;
use crate::store::Store;

/// What the wrappers ask of the store below them beyond [`Store`], and what the limiter and
/// `rls` ask of the wrapped store.
pub(crate) trait StoreExt: Store {
    /// Decides one request against several limits at once (stacked limits), all at the same
    /// instant and atomically: if any blocking check is denied, nothing is consumed from any
    /// limit; otherwise every check that was allowed is consumed. A denied check that
    /// charges ([`Check::charge`]) records its cost either way. Returns one decision per
    /// check, in order, each as that limit alone decided it. Two checks of the same key and
    /// policy are decided in order, the second seeing what the first consumed.
    fn check_many(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send;

    /// Gives `n` units back to `key` under `policy`, as far as the algorithm allows:
    ///
    /// - `Gcra`, `LeakyBucket`: the TAT moves back by `n·T`, never before now;
    /// - `TokenBucket`: `n` tokens are added, up to the capacity;
    /// - `FixedWindow`, `FixedWindowFromFirst`, `SlidingWindow`: the count of the current
    ///   window goes down by `n`, not below 0 (earlier windows are left as they are);
    /// - `SlidingWindowLog`: the newest `n` units of the log are removed.
    ///
    /// A blocked client stays blocked, and a client with no state has nothing to get back.
    fn refund(
        &self,
        key: &str,
        policy: &Policy,
        n: u32,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The decision for one request of `cost` by `key` under `policy`, when this store can
    /// make it at once, in this process: a `MemoryStore` always can; the cache of denials can
    /// for a client it holds a denial of, and the leases from a lease in hand. The layer then
    /// answers without its asynchronous path (no boxed future, nothing to cancel).
    ///
    /// `None` means the store must be asked with [`check`](Store::check); a store that
    /// answers `None` must have changed nothing.
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision>;

    /// [`check_many`](Self::check_many)'s decisions, when this store can make them at once in
    /// this process (a `MemoryStore` always can), without a future: `rls` answers its memory
    /// rows without the asynchronous path. `None` means the store must be asked with
    /// `check_many`; a store that answers `None` must have changed nothing.
    fn check_many_ready(&self, checks: &[Check<'_>]) -> Option<Vec<Decision>>;

    /// The clock this store decides by, when it reads one in this process (a `MemoryStore`,
    /// or a `RedisStore` given a clock); `None` when its time comes from elsewhere (Redis
    /// `TIME`). Wrappers that keep state bounded in time read it ([`now_us`]), so that they
    /// agree with the store, `ManualClock`s included.
    fn clock(&self) -> Option<&dyn Clock>;

    /// Told that a call to this store was given up: it timed out, or its client gave up
    /// after waiting (both count as failures). A store that keeps a connection between calls
    /// drops it here: a connection whose peer went away without a reset (a host gone, a
    /// firewall that forgot it) never fails by itself, and every later call would wait on it.
    fn abandoned(&self);

    /// The `store` label of this store's metrics: `memory`, `redis`, `redis_cluster`,
    /// `redis_sentinel`, or a user's store's short type name.
    fn label(&self) -> Arc<str>;
}

/// What the leases ask of the store below them: a lease of units, and giving unused ones
/// back. Only the stores, the backend's dispatch, and the failure handling (which bounds
/// these calls as it bounds decisions) implement it; the wrappers above the leases never see
/// it.
pub(crate) trait Leasing: StoreExt {
    /// Leases from `min` to `max` units (`1 ≤ min ≤ max`) of `key`'s quota under `policy` in
    /// one atomic step, for an instance to spend locally (see the leases module): as many as
    /// the algorithm admits back to back at this instant, consumed as if that many requests
    /// had been allowed; none if fewer than `min` fit, with the denial a request of cost
    /// `min` would get.
    fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> impl Future<Output = Result<Grant, StoreError>> + Send;

    /// Gives back up to `unused` units of `grant` (a lease of `key` under `policy`) and
    /// returns how many were taken back: only what the algorithm can take back exactly (the
    /// leases module's docs state the rule: for the buckets, what is still ahead of now; for
    /// the fixed windows, within the lease's window).
    fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> impl Future<Output = Result<u32, StoreError>> + Send;
}

/// Quotas set for one client under one rule at run time (see
/// [`Control::set_quota`](crate::Control::set_quota)), kept in the store, so that every instance
/// on it sees them. The stores and every wrapper implement it; a user's [`Store`] answers
/// [`StoreError::Unsupported`] (a [`StateBackedStore`](crate::store::StateBackedStore) keeps
/// them in its backend). An override is kept as `L:P:B` (limit, period in µs, burst or 0) at
/// the key `<prefix>:<rule>:quota:<client key>` (the client key as each store writes keys).
pub(crate) trait QuotaOverrides: StoreExt {
    /// The quota set for `key` under the rule named `rule`, if one is set and has not expired.
    fn quota_override(
        &self,
        rule: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<Quota>, StoreError>> + Send;

    /// Sets `quota` for `key` under the rule named `rule`, for `ttl` (`None`: until cleared;
    /// a store that needs an expiry keeps it for [`LONGEST_OVERRIDE`]), or clears it (`None`).
    fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// How long an override set without an expiry lives on a store whose keys must expire (the
/// state-backed stores, memcached): ten years.
pub(crate) const LONGEST_OVERRIDE: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Slots of requests in flight (see [`InFlight`]): taken, given back and renewed by id. Every
/// store and every wrapper implements it; the wrappers pass it on untouched but for the
/// failure handling, which bounds these calls as it bounds decisions and keeps the slots it
/// took in its fallback while the store was away.
///
/// In a shared store a slot is a lease that ends `limit.ttl()` after it was taken or last
/// renewed, and a slot whose lease ended no longer counts: the slots of an instance that
/// crashed come back by themselves. The memory store's slots need no lease.
pub(crate) trait InFlightSlots: StoreExt {
    /// Takes the slot `id` of `key` under `limit` if fewer than `limit.max()` of its slots are
    /// held (their leases not ended), in one atomic step: allowed, with what is left; or
    /// refused, holding nothing, with a short `retry_after` hint.
    fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Gives the slot `id` of `key` under `limit` back; nothing if it is not held (never
    /// taken, or its lease ended).
    fn give_back_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Gives the slot back at once, in this process, if this store can (the memory store,
    /// a slot taken in a fallback): whether it did. `false`: nothing was done, and the slot
    /// needs [`give_back_slot`](Self::give_back_slot). By default never: a shared store is
    /// asked.
    fn give_back_slot_now(&self, _key: &str, _limit: &InFlight, _id: u64) -> bool {
        false
    }

    /// Renews the leases of `slots` (still held) to their limit's `ttl` from now; a slot whose
    /// lease ended is not taken again. One call for the batch where the store allows it.
    fn renew_slots(
        &self,
        slots: &[HeldSlot<'_>],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The time wrappers keep their state by, in µs: `store`'s [`clock`](StoreExt::clock) when it
/// has one here (so a `ManualClock` drives them too), else a monotonic clock of this process.
pub(crate) fn now_us(store: &impl StoreExt) -> u64 {
    match store.clock() {
        Some(clock) => clock.now(),
        None => crate::clock::monotonic_micros(),
    }
}
