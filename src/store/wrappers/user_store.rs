//! [`UserStore`]: a user's [`Store`] with the fallbacks of what it does not do itself, and
//! [`BoxedStore`], the contract with boxed futures, so that the layer's type never names the
//! user's store.
//!
//! A user implements four methods; the wrappers ask for more (the contract,
//! [`StoreExt`]). The fallbacks are exact, and no cheaper than one [`check`](Store::check) per
//! request: stacked limits checked one by one, a lease of one check of its smallest size,
//! nothing given back, no refunds, nothing decided at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::check::Check;
use crate::store::contract::StoreExt;
use crate::store::grant::Grant;
use crate::store::Store;

/// A user's store, with the fallbacks of the contract.
pub(crate) struct UserStore<S>(S);

impl<S: Store> UserStore<S> {
    /// `store` with the fallbacks.
    pub(crate) fn new(store: S) -> Self {
        Self(store)
    }
}

impl<S: Store> Store for UserStore<S> {
    fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        self.0.check(key, policy, cost)
    }

    fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        self.0.peek(key, policy, cost)
    }

    fn reset(
        &self,
        key: &str,
        policy: &Policy,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.reset(key, policy)
    }

    fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.block(key, policy, duration)
    }
}

impl<S: Store> StoreExt for UserStore<S> {
    /// The checks one by one, in order: not atomic (an earlier limit counts a request that a
    /// later one denies), and nothing denied is charged.
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        check_in_order(&self.0, checks).await
    }

    /// Not the user's to give: [`StoreError::Unsupported`].
    async fn refund(&self, _: &str, _: &Policy, _: u32) -> Result<(), StoreError> {
        Err(StoreError::Unsupported("refund"))
    }

    /// One request of cost `min`, granted `min` units if it is allowed.
    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        _: u32,
    ) -> Result<Grant, StoreError> {
        lease_by_check(&self.0, key, policy, min).await
    }

    /// Takes nothing back: unused units count as used, which only ever admits less.
    async fn release(&self, _: &str, _: &Policy, _: u32, _: &Grant) -> Result<u32, StoreError> {
        Ok(0)
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

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A store of a type the layer does not name: [`UserStore`], or in tests any store of the
/// contract.
pub(crate) type BoxedStore = Box<dyn DynStore>;

/// [`Store`] and [`StoreExt`] with boxed futures, so that a store can be a trait object. The
/// methods keep the contract's names, so the backend calls a boxed store as it calls the
/// built-in ones.
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
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision>;
    fn clock(&self) -> Option<&dyn Clock>;
    fn abandoned(&self);
    fn label(&self) -> Arc<str>;
}

impl<S: StoreExt> DynStore for S {
    fn check<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(Store::check(self, key, policy, cost))
    }

    fn peek<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(Store::peek(self, key, policy, cost))
    }

    fn reset<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::reset(self, key, policy))
    }

    fn block<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::block(self, key, policy, duration))
    }

    fn check_many<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> BoxFuture<'a, Result<Vec<Decision>, StoreError>> {
        Box::pin(StoreExt::check_many(self, checks))
    }

    fn refund<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        n: u32,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(StoreExt::refund(self, key, policy, n))
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        min: u32,
        max: u32,
    ) -> BoxFuture<'a, Result<Grant, StoreError>> {
        Box::pin(StoreExt::acquire(self, key, policy, min, max))
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        unused: u32,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<u32, StoreError>> {
        Box::pin(StoreExt::release(self, key, policy, unused, grant))
    }

    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        StoreExt::check_ready(self, key, policy, cost)
    }

    fn clock(&self) -> Option<&dyn Clock> {
        StoreExt::clock(self)
    }

    fn abandoned(&self) {
        StoreExt::abandoned(self);
    }

    fn label(&self) -> Arc<str> {
        StoreExt::label(self)
    }
}
