//! A store of a user's, for the stack's unit tests: it decides in memory, but only through
//! [`Store`], asynchronously, as a remote store does (nothing at once, no leases or refunds of
//! its own).

use std::time::Duration;

use super::StoreExt;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::{MemoryStore, Store};

pub(crate) struct UserStore(pub(crate) MemoryStore);

impl UserStore {
    pub(crate) fn new() -> Self {
        Self(MemoryStore::new())
    }
}

impl Store for UserStore {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.0.check(key, policy, cost).await
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.0.peek(key, policy, cost).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.0.reset(key, policy).await
    }

    async fn block(&self, key: &str, policy: &Policy, for_: Duration) -> Result<(), StoreError> {
        self.0.block(key, policy, for_).await
    }
}

/// The defaults, as every store of a user's gets them.
impl StoreExt for UserStore {}
