//! [`Native`]: a store that keeps the whole contract itself (leases, refunds, charged hits of
//! its own), boxed as the backend boxes a user's store: the state-backed stores, and tests'
//! stores with a lease of their own making.

use std::sync::Arc;
use std::time::Duration;

use super::user_store::{BoxFuture, DynStore};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::{InFlight, Policy, Quota};
use crate::store::check::Check;
use crate::store::contract::{InFlightSlots, Leasing, QuotaOverrides, StoreExt};
use crate::store::grant::Grant;
use crate::store::slot::HeldSlot;
use crate::store::Store;

/// A store of the contract's own as a boxed store.
pub(crate) struct Native<S>(pub(crate) S);

impl<S: Leasing + QuotaOverrides + InFlightSlots> DynStore for Native<S> {
    fn check<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(Store::check(&self.0, key, policy, cost))
    }

    fn peek<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(Store::peek(&self.0, key, policy, cost))
    }

    fn reset<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::reset(&self.0, key, policy))
    }

    fn block<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::block(&self.0, key, policy, duration))
    }

    fn check_many<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> BoxFuture<'a, Result<Vec<Decision>, StoreError>> {
        Box::pin(StoreExt::check_many(&self.0, checks))
    }

    fn refund<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        n: u32,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(StoreExt::refund(&self.0, key, policy, n))
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        min: u32,
        max: u32,
    ) -> BoxFuture<'a, Result<Grant, StoreError>> {
        Box::pin(Leasing::acquire(&self.0, key, policy, min, max))
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        unused: u32,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<u32, StoreError>> {
        Box::pin(Leasing::release(&self.0, key, policy, unused, grant))
    }

    fn quota_override<'a>(
        &'a self,
        rule: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Quota>, StoreError>> {
        Box::pin(QuotaOverrides::quota_override(&self.0, rule, key))
    }

    fn set_quota_override<'a>(
        &'a self,
        rule: &'a str,
        key: &'a str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(QuotaOverrides::set_quota_override(
            &self.0, rule, key, quota, ttl,
        ))
    }

    fn take_slot<'a>(
        &'a self,
        key: &'a str,
        limit: &'a InFlight,
        id: u64,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(InFlightSlots::take_slot(&self.0, key, limit, id))
    }

    fn give_back_slot<'a>(
        &'a self,
        key: &'a str,
        limit: &'a InFlight,
        id: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(InFlightSlots::give_back_slot(&self.0, key, limit, id))
    }

    fn give_back_slot_now(&self, key: &str, limit: &InFlight, id: u64) -> bool {
        InFlightSlots::give_back_slot_now(&self.0, key, limit, id)
    }

    fn renew_slots<'a>(
        &'a self,
        slots: &'a [HeldSlot<'a>],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(InFlightSlots::renew_slots(&self.0, slots))
    }

    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        StoreExt::check_ready(&self.0, key, policy, cost)
    }

    fn clock(&self) -> Option<&dyn Clock> {
        StoreExt::clock(&self.0)
    }

    fn abandoned(&self) {
        StoreExt::abandoned(&self.0);
    }

    fn label(&self) -> Arc<str> {
        StoreExt::label(&self.0)
    }
}
