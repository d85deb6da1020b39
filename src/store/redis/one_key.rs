//! The calls on one client's key, written once for the three Redis stores.
//!
//! [`RedisStore`](crate::store::RedisStore), `RedisClusterStore` and `RedisSentinelStore` differ
//! in how they reach Redis, not in what they ask it: each says how it names a key, reads its
//! clock and runs a script call (the required methods of [`OneKey`]), and the decision, the
//! peek, the client controls and the leases follow from those here.

use std::future::Future;

use super::script::{self, Call, Control, Scripts};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::lease::Lease;
use crate::quota::Policy;
use crate::store::Grant;

/// A Redis store's calls on one client's key: one script call each.
pub(crate) trait OneKey: Sync {
    /// The store's scripts.
    fn scripts(&self) -> &Scripts;

    /// The Redis key of `client_key`'s state under `policy`.
    fn key_of(&self, policy: &Policy, client_key: &str) -> String;

    /// The `now` argument of every script: the store clock's µs, or `""` for Redis `TIME`.
    fn now_arg(&self) -> String;

    /// Runs one script call and reads its integer reply.
    fn run(&self, call: Call<'_>) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;

    /// Decides one request: the algorithm's own script.
    fn check_key(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        async move {
            let now = self.now_arg();
            let call = self
                .scripts()
                .single(self.key_of(policy, key), policy, cost, &now);
            script::decision_from_reply(policy.params().burst, &self.run(call).await?)
        }
    }

    /// One dry run of the algorithm's script (see `lua/gcra.lua`, `ARGV[7]`): nothing written.
    fn peek_key(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        async move {
            let now = self.now_arg();
            let call = self
                .scripts()
                .peek(self.key_of(policy, key), policy, cost, &now);
            script::decision_from_reply(policy.params().burst, &self.run(call).await?)
        }
    }

    /// Resets, blocks or refunds the client: `lua/control.lua`.
    fn control(
        &self,
        key: &str,
        policy: &Policy,
        action: Control,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move {
            let now = self.now_arg();
            let call = self
                .scripts()
                .control(self.key_of(policy, key), policy, action, &now);
            self.run(call).await.map(drop)
        }
    }

    /// Leases from `min` to `max` units (`lua/lease.lua`); an algorithm that cannot lease
    /// gets one check of cost `min`, as [`Store::acquire`](crate::Store::acquire)'s default.
    fn acquire_key(
        &self,
        key: &str,
        policy: &Policy,
        (min, max): (u32, u32),
    ) -> impl Future<Output = Result<Grant, StoreError>> + Send {
        async move {
            if !Lease::ALGORITHMS.contains(&policy.algorithm()) {
                let decision = self.check_key(key, policy, min).await?;
                let granted = if decision.allowed { min } else { 0 };
                return Ok(Grant::new(granted, decision, 0));
            }
            let now = self.now_arg();
            let call = self
                .scripts()
                .acquire(self.key_of(policy, key), policy, (min, max), &now);
            script::grant_from_reply(policy.params().burst, &self.run(call).await?)
        }
    }

    /// Gives back up to `unused` units of `grant` (`lua/lease.lua`).
    fn release_key(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> impl Future<Output = Result<u32, StoreError>> + Send {
        async move {
            if !Lease::ALGORITHMS.contains(&policy.algorithm()) || unused == 0 {
                return Ok(0);
            }
            let now = self.now_arg();
            let call = self.scripts().release(
                self.key_of(policy, key),
                policy,
                (unused, grant.mark),
                &now,
            );
            script::released_from_reply(&self.run(call).await?)
        }
    }
}
