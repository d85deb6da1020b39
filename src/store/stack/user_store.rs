//! A store of a user's, for the stack's unit tests: it decides in memory, but only through
//! [`Store`], asynchronously, as a remote store does (nothing at once, no leases or refunds of
//! its own).

use std::time::Duration;

use super::StoreExt;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::{MemoryStore, Store};

pub(crate) struct UserStore {
    memory: MemoryStore,
    /// Whether `reset` never finishes, as on a hung Redis.
    reset_hangs: bool,
}

impl UserStore {
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

impl Store for UserStore {
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

/// The defaults, as every store of a user's gets them.
impl StoreExt for UserStore {}
