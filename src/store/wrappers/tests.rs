//! Test helpers of the wrappers: [`Remote`], a store of a user's that decides in memory, but
//! only through [`Store`], asynchronously, as a remote store does (with the fallbacks of the
//! user-store adapter: nothing at once, no leases or refunds of its own).

use std::time::Duration;

use super::Backend;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
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
