//! Test helpers of the wrappers: [`Remote`], a store of a user's that decides in memory, but
//! only through [`Store`], asynchronously, as a remote store does (with the fallbacks of the
//! user-store adapter: nothing at once, no leases or refunds of its own); [`Native`], a store
//! of the contract's own as the backend boxes it.

use std::sync::Arc;
use std::time::Duration;

use super::user_store::{BoxFuture, DynStore};
use super::Backend;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::check::Check;
use crate::store::contract::{Leasing, StoreExt};
use crate::store::grant::Grant;
use crate::store::memory::MemoryStore;
use crate::store::Store;

pub(crate) struct Remote {
    memory: MemoryStore,
    /// Whether `reset` never finishes, as on a hung Redis.
    reset_hangs: bool,
}

impl Remote {
    pub(crate) fn new() -> Self {
        Self {
            memory: MemoryStore::new(),
            reset_hangs: false,
        }
    }

    /// A store whose `reset` never finishes, as on a hung Redis.
    pub(crate) fn with_hanging_reset() -> Self {
        Self {
            reset_hangs: true,
            ..Self::new()
        }
    }
}

impl Store for Remote {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.memory.check(key, policy, cost).await
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.memory.peek(key, policy, cost).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        if self.reset_hangs {
            std::future::pending::<()>().await;
        }
        self.memory.reset(key, policy).await
    }

    async fn block(&self, key: &str, policy: &Policy, for_: Duration) -> Result<(), StoreError> {
        self.memory.block(key, policy, for_).await
    }
}

/// `Remote` with the fallbacks, as the backend wraps every store of a user's.
pub(crate) fn remote() -> Backend {
    Backend::of(Remote::new())
}

/// A store of the contract's own (a test's store with a lease of its own making) as a boxed
/// store, for [`Backend::custom`].
pub(crate) struct Native<S>(pub(crate) S);

impl<S: Leasing> DynStore for Native<S> {
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

/// The layer boxes each decision that waits for Redis, and the wrappers' futures are inside
/// it. A connection checkout, a `NOSCRIPT` retry and a lease refill are rare, so each is
/// boxed where it happens rather than given room in every decision's future (room that would
/// make this one about 22 KB, allocated and copied on every request). Measured on the
/// wrappers the layer builds, over the backend it chooses.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_decision_through_the_layers_wrappers_has_a_small_future() {
    use crate::store::check::Check;
    use crate::store::contract::StoreExt;
    use crate::store::redis::RedisStore;
    use crate::store::wrappers::{wrap, Backend, StoreFailure};
    use crate::{Algorithm, Quota};

    let store = RedisStore::from_url("redis://127.0.0.1:1").unwrap();
    let policy = Policy::new("p", Quota::per_second(10).unwrap(), Algorithm::Gcra).unwrap();
    let wrapped = wrap(Backend::of(store), &StoreFailure::default(), 1_000);
    let check = wrapped.check("client", &policy, 1);
    let bytes = std::mem::size_of_val(&check);
    eprintln!("one decision: {bytes} bytes");
    assert!(bytes <= 1_536, "the decision's future takes {bytes} bytes");
    let checks = [Check::new("client", &policy, 1); 2];
    let many = wrapped.check_many(&checks);
    let bytes = std::mem::size_of_val(&many);
    eprintln!("a stacked decision: {bytes} bytes");
    assert!(
        bytes <= 1_536,
        "a stacked decision's future takes {bytes} bytes"
    );
}
