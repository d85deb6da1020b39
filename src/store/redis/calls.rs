//! What a [`RedisStore`] sends for each method of [`Store`] and of the store contract: one
//! call of one script (see [`Scripts`]) on the store's connection, whatever that connection
//! is (standalone, Sentinel's master, a cluster).

use std::sync::Arc;
use std::time::Duration;

use super::counters::{self, counter_key};
use super::reply;
use super::script::{self, Call, ClientAction, Scripts};
use super::RedisStore;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::lease::Lease;
use crate::quota::Policy;
use crate::quota::Quota;
use crate::store::check::Check;
use crate::store::contract::{Leasing, QuotaOverrides, StoreExt};
use crate::store::grant::Grant;
use crate::store::Store;

impl RedisStore {
    /// The scripts, with their SHA-1s.
    pub(super) fn scripts(&self) -> &Scripts {
        &self.shared.scripts
    }

    /// The `now` argument of every script: the store clock's µs, or `""` for Redis `TIME`.
    pub(super) fn now_arg(&self) -> String {
        self.clock
            .as_ref()
            .map_or_else(String::new, |c| c.now().to_string())
    }

    /// Runs `call` on the store's connection.
    ///
    /// Boxed: the connection's call is most of a decision's future (about 900 bytes), and every
    /// wrapper and the layer would carry it; boxed, the layer's decision future is small
    /// enough for the allocator's fast path too.
    pub(super) async fn eval(&self, call: Call<'_>) -> Result<Vec<i64>, StoreError> {
        Box::pin(self.shared.connection.run(call)).await
    }

    /// One request of `cost`, or a dry run of it (`dry`): one call of the algorithm's script.
    async fn decide(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
        dry: bool,
    ) -> Result<Decision, StoreError> {
        if policy.plain_counter() {
            return self
                .counters_of(policy)
                .decide_counter(key, policy, cost, dry)
                .await;
        }
        let key = self.state_key(policy, key);
        let now = self.now_arg();
        let scripts = self.scripts();
        let call = match dry {
            false => scripts.single(key, policy, cost, &now),
            true => scripts.peek(key, policy, cost, &now),
        };
        let reply = self.eval(call).await?;
        reply::decision_from_reply(policy.params().burst, &reply)
    }

    /// One request of a plain counter, or a dry run of it: one call of
    /// `lua/plain_counter.lua`, at the instance's time.
    async fn decide_counter(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
        dry: bool,
    ) -> Result<Decision, StoreError> {
        let now = self.counter_now();
        let key = counter_key(key, policy, now);
        let now = now.to_string();
        let scripts = self.scripts();
        let call = match dry {
            false => scripts.single(key, policy, cost, &now),
            true => scripts.peek(key, policy, cost, &now),
        };
        let reply = self.eval(call).await?;
        reply::decision_from_reply(policy.params().burst, &reply)
    }

    /// Reset or refund a plain counter (a `DEL` of the window's counter, or one call of
    /// `lua/plain_counter.lua`); a block is not kept in a count.
    async fn act_on_counter(
        &self,
        key: &str,
        policy: &Policy,
        action: ClientAction,
    ) -> Result<(), StoreError> {
        let now = self.counter_now();
        let key = counter_key(key, policy, now);
        match action {
            ClientAction::Block(micros) if micros > 0 => Err(StoreError::Unsupported("block")),
            ClientAction::Reset | ClientAction::Block(_) => {
                let mut pipe = deadpool_redis::redis::pipe();
                pipe.del(&key).ignore();
                self.pipeline(pipe).await.map(drop)
            }
            ClientAction::Refund(units) => {
                let units = u32::try_from(units).unwrap_or(u32::MAX);
                let call = self
                    .scripts()
                    .plain_refund(key, policy, units, &now.to_string());
                self.eval(call).await.map(drop)
            }
        }
    }

    /// Reset, block or refund one client: one call of `lua/control.lua`.
    async fn act(
        &self,
        key: &str,
        policy: &Policy,
        action: ClientAction,
    ) -> Result<(), StoreError> {
        if policy.plain_counter() {
            let store = self.counters_of(policy);
            return Box::pin(store.act_on_counter(key, policy, action)).await;
        }
        let key = self.state_key(policy, key);
        let now = self.now_arg();
        self.eval(self.scripts().control(key, policy, action, &now))
            .await
            .map(drop)
    }

    /// One request against several limits in one round trip: one `EVALSHA` of the stacked
    /// script (see `lua/stacked.lua`), which decides every check at the same instant, dry, and
    /// stores the allowed ones only if no blocking check was denied. A single check runs its
    /// algorithm's own script, as [`check`](Store::check) does. Atomic wherever one script
    /// may touch every key: always on a standalone Redis, within one hash slot on a cluster.
    async fn check_stacked(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        match checks {
            [] => return Ok(Vec::new()),
            [one] if !one.charge => {
                return Ok(vec![
                    self.decide(one.key, one.policy, one.cost, false).await?,
                ])
            }
            // Charged, and no block to start: the algorithm's own script, charging a denial.
            [one] if !one.blocking || one.policy.block_for_us() == 0 => {
                let (mut keys, now) = self.keys_and_now(checks);
                let key = keys.pop().unwrap_or_default();
                let call = self.scripts().charged(key, one.policy, one.cost, &now);
                let reply = self.eval(call).await?;
                return Ok(vec![reply::decision_from_reply(
                    one.policy.params().burst,
                    &reply,
                )?]);
            }
            _ => {}
        }
        let (keys, now) = self.keys_and_now(checks);
        let reply = self
            .eval(self.scripts().stacked(keys, checks, &now, false))
            .await?;
        reply::decisions_from_reply(checks, &reply)
    }
}

impl RedisStore {
    /// `checks` decided by the stacked script (see
    /// [`check_stacked`](Self::check_stacked)); on a cluster, one call per slot.
    pub(super) async fn scripted(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        #[cfg(feature = "cluster")]
        if self.shared.connection.is_cluster() {
            return Box::pin(super::cluster::check_many(self, checks)).await;
        }
        self.check_stacked(checks).await
    }
}

impl Store for RedisStore {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.decide(key, policy, cost, false).await
    }

    /// One dry run of the algorithm's script (see `lua/gcra.lua`, `ARGV[7]`): one round trip,
    /// nothing written.
    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.decide(key, policy, cost, true).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.act(key, policy, ClientAction::Reset).await
    }

    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        self.act(key, policy, ClientAction::block(duration)).await
    }
}

impl StoreExt for RedisStore {
    /// One `EVALSHA` of the stacked script, which decides every check at the same instant,
    /// dry, and stores the allowed ones only if no blocking check was denied; on a cluster,
    /// one such call per slot (see the type's docs), boxed, as it is rarer and larger.
    /// With plain counters among the checks, the reference's pipelines where they keep the
    /// mode's promise (see `counters.rs`).
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        if checks.iter().any(|c| c.policy.plain_counter()) {
            return Box::pin(counters::check_many(self, checks)).await;
        }
        self.scripted(checks).await
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        self.act(key, policy, ClientAction::Refund(u64::from(n)))
            .await
    }

    /// Never: every decision is a round trip.
    fn check_many_ready(&self, _: &[Check<'_>]) -> Option<Vec<Decision>> {
        None
    }

    /// Never: every decision is a round trip.
    fn check_ready(&self, _: &str, _: &Policy, _: u32) -> Option<Decision> {
        None
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.clock.as_deref()
    }

    /// The kept connection is dropped (the per-second store's too): the next call takes one
    /// from the pool, whose check (a `PING`) drops a connection that does not answer and opens
    /// a new one.
    fn abandoned(&self) {
        self.shared.connection.forget();
        if let Some(per_second) = &self.per_second {
            per_second.shared.connection.forget();
        }
    }

    /// `redis`, `redis_sentinel` or `redis_cluster`, by where the calls go.
    fn label(&self) -> Arc<str> {
        self.shared.connection.label().into()
    }
}

/// One call of `lua/quota.lua` each: a `GET`, a `SET` (with `PX` for an expiry) or a `DEL` of
/// `<prefix>:<rule>:quota:{<client key>}`.
impl QuotaOverrides for RedisStore {
    async fn quota_override(&self, rule: &str, key: &str) -> Result<Option<Quota>, StoreError> {
        let key = script::quota_key(&self.prefix, rule, key);
        match self.eval(self.scripts().quota(key, None)).await?[..] {
            [] => Ok(None),
            [l, p, b] => {
                let n = |v: i64| u64::try_from(v).unwrap_or(0);
                Quota::from_numbers([n(l), n(p), n(b)]).map(Some)
            }
            ref other => Err(StoreError::backend(format!(
                "unexpected quota script reply {other:?} (expected 0 or 3 integers)"
            ))),
        }
    }

    async fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let key = script::quota_key(&self.prefix, rule, key);
        // Whole ms, rounded up, at least 1: PX takes no less.
        let ms = |ttl: Duration| {
            u64::try_from(ttl.as_micros().div_ceil(1000))
                .unwrap_or(u64::MAX)
                .max(1)
        };
        let set = quota.map(|quota| (quota, ttl.map_or(0, ms)));
        self.eval(self.scripts().quota(key, Some(set)))
            .await
            .map(drop)
    }
}

impl Leasing for RedisStore {
    /// A lease of `min` to `max` units: one call of `lua/lease.lua`. An algorithm that does
    /// not lease decides `min` units as one request.
    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        if !Lease::ALGORITHMS.contains(&policy.algorithm()) || policy.plain_counter() {
            let decision = self.decide(key, policy, min, false).await?;
            let granted = if decision.allowed { min } else { 0 };
            return Ok(Grant::new(granted, decision, 0));
        }
        let key = self.state_key(policy, key);
        let now = self.now_arg();
        let reply = self
            .eval(self.scripts().acquire(key, policy, (min, max), &now))
            .await?;
        reply::grant_from_reply(policy.params().burst, &reply)
    }

    /// Gives back `unused` units of `grant`: one call of `lua/lease.lua`.
    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        let leased = Lease::ALGORITHMS.contains(&policy.algorithm()) && !policy.plain_counter();
        if !leased || unused == 0 {
            return Ok(0);
        }
        let key = self.state_key(policy, key);
        let now = self.now_arg();
        let call = self
            .scripts()
            .release(key, policy, (unused, grant.mark), &now);
        let reply = self.eval(call).await?;
        reply::released_from_reply(&reply)
    }
}
