//! [`UserStore`]: a user's [`Store`] with the fallbacks of what it does not do itself, and
//! [`BoxedStore`], the contract with boxed futures, so that the layer's type never names the
//! user's store.
//!
//! A user implements four methods; the wrappers ask for more (the contract,
//! [`StoreExt`](crate::store::contract::StoreExt)). The fallbacks are exact, and no cheaper than one [`check`](Store::check) per
//! request: stacked limits checked one by one, a lease of one check of its smallest size,
//! nothing given back, no refunds, nothing decided at once.

use std::future::Future;
use std::pin::Pin;
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

/// Decides `checks` one by one, in order, with `store`'s [`check`](Store::check).
pub(crate) async fn check_in_order(
    store: &impl Store,
    checks: &[Check<'_>],
) -> Result<Vec<Decision>, StoreError> {
    let mut decisions = Vec::with_capacity(checks.len());
    for c in checks {
        decisions.push(store.check(c.key, c.policy, c.cost).await?);
    }
    Ok(decisions)
}

/// A lease of `min` units from one [`check`](Store::check) of that cost, with no mark (nothing
/// of it is ever given back).
pub(crate) async fn lease_by_check(
    store: &impl Store,
    key: &str,
    policy: &Policy,
    min: u32,
) -> Result<Grant, StoreError> {
    let decision = store.check(key, policy, min).await?;
    let granted = if decision.allowed { min } else { 0 };
    Ok(Grant::new(granted, decision, 0))
}

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A store of a type the layer does not name: a [`UserStore`] (in tests, also a store of
/// the contract's own).
pub(crate) type BoxedStore = Box<dyn DynStore>;

/// The contract ([`Store`] and [`StoreExt`](crate::store::contract::StoreExt)) with boxed futures, so that a store can be a
/// trait object. The methods keep the contract's names, so the backend calls a boxed store as
/// it calls the built-in ones.
pub(crate) trait DynStore: Send + Sync {
    fn check<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>>;
    fn peek<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>>;
    fn reset<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn block<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn check_many<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> BoxFuture<'a, Result<Vec<Decision>, StoreError>>;
    fn refund<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        n: u32,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        min: u32,
        max: u32,
    ) -> BoxFuture<'a, Result<Grant, StoreError>>;
    fn release<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        unused: u32,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<u32, StoreError>>;
    fn quota_override<'a>(
        &'a self,
        rule: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Quota>, StoreError>>;
    fn set_quota_override<'a>(
        &'a self,
        rule: &'a str,
        key: &'a str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn take_slot<'a>(
        &'a self,
        key: &'a str,
        limit: &'a InFlight,
        id: u64,
    ) -> BoxFuture<'a, Result<Decision, StoreError>>;
    fn give_back_slot<'a>(
        &'a self,
        key: &'a str,
        limit: &'a InFlight,
        id: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn give_back_slot_now(&self, key: &str, limit: &InFlight, id: u64) -> bool;
    fn renew_slots<'a>(
        &'a self,
        slots: &'a [HeldSlot<'a>],
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision>;
    fn clock(&self) -> Option<&dyn Clock>;
    fn abandoned(&self);
    fn label(&self) -> Arc<str>;
}

/// A user's store, with the fallbacks of the contract.
pub(crate) struct UserStore<S>(S);

impl<S: Store> UserStore<S> {
    /// `store` with the fallbacks.
    pub(crate) fn new(store: S) -> Self {
        Self(store)
    }
}

impl<S: Store> DynStore for UserStore<S> {
    fn check<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(self.0.check(key, policy, cost))
    }

    fn peek<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(self.0.peek(key, policy, cost))
    }

    fn reset<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.0.reset(key, policy))
    }

    fn block<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.0.block(key, policy, duration))
    }

    /// The checks one by one, in order: not atomic (an earlier limit counts a request that a
    /// later one denies), and nothing denied is charged.
    fn check_many<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> BoxFuture<'a, Result<Vec<Decision>, StoreError>> {
        Box::pin(check_in_order(&self.0, checks))
    }

    /// Not the user's to give: [`StoreError::Unsupported`].
    fn refund<'a>(
        &'a self,
        _: &'a str,
        _: &'a Policy,
        _: u32,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Unsupported("refund")) })
    }

    /// One request of cost `min`, granted `min` units if it is allowed.
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        min: u32,
        _: u32,
    ) -> BoxFuture<'a, Result<Grant, StoreError>> {
        Box::pin(lease_by_check(&self.0, key, policy, min))
    }

    /// Takes nothing back: unused units count as used, which only ever admits less.
    fn release<'a>(
        &'a self,
        _: &'a str,
        _: &'a Policy,
        _: u32,
        _: &'a Grant,
    ) -> BoxFuture<'a, Result<u32, StoreError>> {
        Box::pin(async { Ok(0) })
    }

    /// Not the user's store's to keep: [`StoreError::Unsupported`] (a `StateBackedStore`
    /// keeps them).
    fn quota_override<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<Quota>, StoreError>> {
        Box::pin(async { Err(StoreError::Unsupported("quota overrides")) })
    }

    fn set_quota_override<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: Option<Quota>,
        _: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Unsupported("quota overrides")) })
    }

    /// Not the user's to keep: a [`Store`] has no slots, so an in-flight rule on it answers
    /// as a store that cannot decide ([`StoreError::Unsupported`]); a
    /// [`StateBackedStore`](crate::store::StateBackedStore) keeps them.
    fn take_slot<'a>(
        &'a self,
        _: &'a str,
        _: &'a InFlight,
        _: u64,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(async { Err(StoreError::Unsupported("requests in flight")) })
    }

    /// Nothing was taken: nothing to give back.
    fn give_back_slot<'a>(
        &'a self,
        _: &'a str,
        _: &'a InFlight,
        _: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// Nothing was taken: given back at once.
    fn give_back_slot_now(&self, _: &str, _: &InFlight, _: u64) -> bool {
        true
    }

    fn renew_slots<'a>(&'a self, _: &'a [HeldSlot<'a>]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// Nothing at once: the store is asked.
    fn check_ready(&self, _: &str, _: &Policy, _: u32) -> Option<Decision> {
        None
    }

    /// The wrappers keep their state by this process's monotonic clock.
    fn clock(&self) -> Option<&dyn Clock> {
        None
    }

    fn abandoned(&self) {}

    /// The user's store's own type name, not the adapter's.
    fn label(&self) -> Arc<str> {
        crate::telemetry::store_label::<S>()
    }
}
