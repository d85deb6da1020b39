//! The Redis Cluster store: the Redis store's scripts, sent to the node that owns each key.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::cluster::{ClusterConnection, Config, Pool};
use deadpool_redis::redis::cluster_routing::Slot;
use deadpool_redis::{PoolConfig, Runtime, Timeouts};
use futures_util::future::try_join_all;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, ConfigErrorKind, StoreError};
use crate::quota::Policy;
use crate::store::redis::cached::CachedConnection;
use crate::store::redis::calls::{self, ScriptRunner};
use crate::store::redis::redact::Secrets;
use crate::store::redis::script::{self, Call, Control, Scripts, DEFAULT_PREFIX};
use crate::store::stack::{Check, Grant, StoreExt};
use crate::store::Store;

/// How long getting or checking a pooled connection may take in a pool made by `from_nodes`
/// (the layer's `store_timeout` bounds each decision well below this).
const POOL_TIMEOUT: Duration = Duration::from_secs(1);

/// Keeps rate-limit state in a Redis Cluster, with the same scripts, keys and decisions as
/// [`RedisStore`](crate::store::RedisStore).
///
/// Each decision is one `EVALSHA` on the master that owns its key; redis-rs's cluster client
/// follows `MOVED` and `ASK` redirections and refreshes its slot map after a failover or a
/// resharding, and a node that has not seen a script yet (`NOSCRIPT`, e.g. a replica just
/// promoted) gets it by `EVAL`. Keys are `<prefix>:<policy>:<algorithm>:{<client key>}`: the
/// client key is the hash tag, so one client's state under every policy lives in one slot.
///
/// **Stacked limits across slots.** A stacked decision (`StoreExt::check_many`) whose keys all
/// share one slot (one client key under several policies) is one atomic script call, as on a
/// standalone Redis. Checks of different client keys (e.g. per IP and per API key) usually
/// fall in different slots, which no single script may touch. They are grouped by slot and
/// decided in two phases, each group in one call and the groups concurrently: a dry run of
/// every group, which writes nothing; then, only if no blocking check was denied, the commit
/// of every group. The one remaining weakness: between the dry run and the commit, a
/// concurrent request may take the last token of one group's limit, so that group denies at
/// commit while the other groups have counted the request. Each limit stays exact on its own
/// (no limit ever allows more than its quota); a request may be counted by one limit although
/// another one denied it, as can happen with the default `StoreExt::check_many`.
///
/// Building a store never connects; the first decision does.
///
/// ```no_run
/// use tollgate::{key, store::RedisClusterStore, Quota, RateLimitLayer};
///
/// let store = RedisClusterStore::from_nodes(&[
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])?;
/// let layer = RateLimitLayer::builder()
///     .quota(Quota::per_minute(100)?)
///     .key(key::Header::new("x-api-key"))
///     .store(store)
///     .build()?;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct RedisClusterStore {
    pool: Pool,
    /// The seed URLs given to `from_nodes`, credentials redacted, for `Debug`.
    nodes: Option<Arc<[String]>>,
    prefix: Arc<str>,
    clock: Option<Arc<dyn Clock>>,
    shared: Arc<Shared>,
}

/// What all clones of a store share: the scripts and the cluster connection in use.
struct Shared {
    scripts: Scripts,
    /// One cluster connection (itself multiplexed, to every node) taken from the pool once and
    /// reused; dropped after an error that may have broken it.
    connection: CachedConnection<ClusterConnection>,
}

impl RedisClusterStore {
    /// A store on a new cluster pool seeded with `nodes` (`redis://host:port`, `rediss://…`,
    /// with credentials if the cluster needs them): any reachable node tells the client the
    /// others.
    ///
    /// Fails only when a URL cannot be parsed or none is given; the cluster need not be up.
    /// Errors and `Debug` show the URLs with their passwords replaced by `***`.
    pub fn from_nodes<S: AsRef<str>>(nodes: &[S]) -> Result<Self, ConfigError> {
        let urls: Vec<String> = nodes.iter().map(|n| n.as_ref().to_owned()).collect();
        let secrets: Vec<Secrets<'_>> = urls.iter().map(|u| Secrets::of(u)).collect();
        let redact = |text: &str| {
            secrets
                .iter()
                .fold(text.to_owned(), |text, s| s.redact(&text))
        };
        let redacted: Vec<String> = urls.iter().map(|u| redact(u)).collect();
        if urls.is_empty() {
            return Err(ConfigError::of(
                ConfigErrorKind::Store,
                "a Redis Cluster store needs at least one node URL",
            ));
        }
        #[cfg(feature = "tls")]
        crate::store::redis::tls::install_crypto_provider();
        let mut config = Config::from_urls(urls.clone());
        config.pool = Some(PoolConfig {
            timeouts: Timeouts {
                wait: Some(POOL_TIMEOUT),
                create: Some(POOL_TIMEOUT),
                recycle: Some(POOL_TIMEOUT),
            },
            ..PoolConfig::default()
        });
        let pool = config.create_pool(Some(Runtime::Tokio1)).map_err(|e| {
            ConfigError::of(
                ConfigErrorKind::Store,
                format!(
                    "invalid Redis Cluster nodes {redacted:?}: {}",
                    redact(&e.to_string())
                ),
            )
        })?;
        Ok(Self {
            nodes: Some(redacted.into()),
            ..Self::from_pool(pool)
        })
    }

    /// A store on an existing deadpool-redis cluster pool (e.g. one the app also uses).
    pub fn from_pool(pool: Pool) -> Self {
        Self {
            pool,
            nodes: None,
            prefix: DEFAULT_PREFIX.into(),
            clock: None,
            shared: Arc::new(Shared {
                scripts: Scripts::new(),
                connection: CachedConnection::new(),
            }),
        }
    }

    /// Sets the key prefix (default `"tollgate"`). It must not hold `{`, which would change
    /// the keys' hash tag.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<Arc<str>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sends this clock's time with every decision instead of using each node's `TIME`.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The Redis key that holds `client_key`'s state under `policy`, as
    /// [`RedisStore::state_key`](crate::store::RedisStore::state_key) names it.
    pub fn state_key(&self, policy: &Policy, client_key: &str) -> String {
        script::state_key(&self.prefix, policy, client_key)
    }

    /// Decides the checks at `indexes` (keys of one slot) in one stacked script call.
    async fn decide_group(
        &self,
        checks: &[Check<'_>],
        keys: &[String],
        indexes: &[usize],
        now: &str,
        dry: bool,
    ) -> Result<Vec<Decision>, StoreError> {
        let group: Vec<Check<'_>> = indexes
            .iter()
            .filter_map(|&i| checks.get(i))
            .copied()
            .collect();
        let group_keys: Vec<String> = indexes
            .iter()
            .filter_map(|&i| keys.get(i))
            .cloned()
            .collect();
        let reply = self
            .eval(self.shared.scripts.stacked(group_keys, &group, now, dry))
            .await?;
        script::decisions_from_reply(&group, &reply)
    }

    /// After a dry run that blocked the request: each group with a blocking check whose denial
    /// starts a block (its policy has `block_for`) runs again for real, which writes only
    /// the blocks when it is denied again (a group that became allowed between the two calls
    /// consumes, as any group of an allowed request would).
    async fn start_blocks(
        &self,
        checks: &[Check<'_>],
        keys: &[String],
        groups: &[Vec<usize>],
        now: &str,
        mut decisions: Vec<Decision>,
    ) -> Result<Vec<Decision>, StoreError> {
        let starts_block = |i: &usize| {
            let denied = decisions.get(*i).is_some_and(|d| !d.allowed);
            checks
                .get(*i)
                .is_some_and(|c| c.blocking && denied && c.policy.block_for_us() > 0)
        };
        let blocking: Vec<&Vec<usize>> = groups
            .iter()
            .filter(|g| g.iter().any(starts_block))
            .collect();
        for group in blocking {
            let again = self.decide_group(checks, keys, group, now, false).await?;
            for (&i, decision) in group.iter().zip(again) {
                if let Some(slot) = decisions.get_mut(i) {
                    *slot = decision;
                }
            }
        }
        Ok(decisions)
    }

    /// Decides every group concurrently and puts the decisions back in the checks' order.
    async fn decide_groups(
        &self,
        checks: &[Check<'_>],
        keys: &[String],
        groups: &[Vec<usize>],
        now: &str,
        dry: bool,
    ) -> Result<Vec<Decision>, StoreError> {
        let replies = try_join_all(
            groups
                .iter()
                .map(|g| self.decide_group(checks, keys, g, now, dry)),
        )
        .await?;
        let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
        for (group, replies) in groups.iter().zip(replies) {
            for (&i, decision) in group.iter().zip(replies) {
                if let Some(slot) = decisions.get_mut(i) {
                    *slot = Some(decision);
                }
            }
        }
        decisions
            .into_iter()
            .map(|d| d.ok_or_else(|| StoreError::backend("a stacked check got no decision")))
            .collect()
    }
}

impl ScriptRunner for RedisClusterStore {
    fn key_prefix(&self) -> &str {
        &self.prefix
    }

    fn script_clock(&self) -> Option<&Arc<dyn Clock>> {
        self.clock.as_ref()
    }

    fn scripts(&self) -> &Scripts {
        &self.shared.scripts
    }

    /// Runs `call` on the cluster connection, which sends it to the node of its first key; an
    /// error that may have broken the connection makes the next decision reconnect.
    async fn eval(&self, call: Call<'_>) -> Result<Vec<i64>, StoreError> {
        self.shared
            .connection
            .run(call, || async {
                let pooled = self.pool.get().await.map_err(StoreError::backend)?;
                Ok(ClusterConnection::clone(&pooled))
            })
            .await
    }
}

/// The indexes of `keys` grouped by hash slot, groups in order of their first key.
fn group_by_slot(keys: &[String]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: HashMap<Slot, usize> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        let next = groups.len();
        let g = *group_of.entry(Slot::for_key(key)).or_insert(next);
        if g == next {
            groups.push(Vec::new());
        }
        if let Some(group) = groups.get_mut(g) {
            group.push(i);
        }
    }
    groups
}

impl Store for RedisClusterStore {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        calls::check(self, key, policy, cost).await
    }

    /// One dry run of the algorithm's script (see `lua/gcra.lua`, `ARGV[7]`): one round trip,
    /// nothing written.
    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        calls::peek(self, key, policy, cost).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        calls::act(self, key, policy, Control::Reset).await
    }

    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        calls::act(self, key, policy, Control::block(duration)).await
    }
}

impl StoreExt for RedisClusterStore {
    /// Decides one request against several limits: one atomic script call when every key is
    /// in one slot, else a dry run of each slot's group and a commit (see the type's docs).
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        match checks {
            [] => return Ok(Vec::new()),
            [one] => return Ok(vec![self.check(one.key, one.policy, one.cost).await?]),
            _ => {}
        }
        let keys: Vec<String> = checks
            .iter()
            .map(|c| self.state_key(c.policy, c.key))
            .collect();
        let now = calls::now(self);
        let groups = group_by_slot(&keys);
        if groups.len() == 1 {
            let reply = self
                .eval(self.shared.scripts.stacked(keys, checks, &now, false))
                .await?;
            return script::decisions_from_reply(checks, &reply);
        }
        let dry = self
            .decide_groups(checks, &keys, &groups, &now, true)
            .await?;
        let blocked = checks
            .iter()
            .zip(&dry)
            .any(|(c, d)| c.blocking && !d.allowed);
        if blocked {
            return self.start_blocks(checks, &keys, &groups, &now, dry).await;
        }
        self.decide_groups(checks, &keys, &groups, &now, false)
            .await
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.clock.as_deref()
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        calls::act(self, key, policy, Control::Refund(u64::from(n))).await
    }

    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        calls::acquire(self, key, policy, min, max).await
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        calls::release(self, key, policy, unused, grant).await
    }
}

impl fmt::Debug for RedisClusterStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClusterStore")
            .field("nodes", &self.nodes)
            .field("prefix", &self.prefix)
            .field("clock", &self.clock)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_grouped_by_their_hash_tag() {
        let keys: Vec<String> = ["a:{ip}", "b:{key}", "c:{ip}", "d:{other}", "e:{key}"]
            .map(String::from)
            .into();
        assert_eq!(group_by_slot(&keys), vec![vec![0, 2], vec![1, 4], vec![3]]);
    }

    #[test]
    fn debug_and_errors_hide_passwords() {
        let store = RedisClusterStore::from_nodes(&[
            "redis://u:hunter2@127.0.0.1:7000",
            "redis://u:hunter2@127.0.0.1:7001",
        ])
        .unwrap();
        let debug = format!("{store:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("redis://u:***@127.0.0.1:7000"), "{debug}");
        for nodes in [
            [
                "redis://:hunter2@127.0.0.1:notaport",
                "redis://:hunter2@h:1",
            ],
            ["redis://:hunter2@127.0.0.1:7000", "redis://:pw9@h:1"],
        ] {
            let error = RedisClusterStore::from_nodes(&nodes)
                .unwrap_err()
                .to_string();
            assert!(
                !error.contains("hunter2") && !error.contains("pw9"),
                "{error}"
            );
            assert!(error.contains("***"), "{error}");
        }
        let empty: [&str; 0] = [];
        assert!(RedisClusterStore::from_nodes(&empty).is_err());
    }
}
