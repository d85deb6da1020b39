//! Quotas set for one client under one rule at run time, kept in the store (so that every
//! instance on it sees them) and read through a cache of at most [`OVERRIDE_TTL`] per
//! instance, one read at a time per client.

use std::sync::Arc;
use std::time::Duration;

use super::Engine;
use crate::error::StoreError;
use crate::lookup_cache::{Found, LookupCache};
use crate::quota::Quota;
use crate::store::contract::QuotaOverrides;

/// How long an instance keeps what it read of a client's override: a change made through any
/// instance reaches every other within this and one store read (a second at most).
pub const OVERRIDE_TTL: Duration = Duration::from_millis(750);

/// How many clients' overrides (or their absence) an instance keeps at most.
const OVERRIDE_ENTRIES: usize = 100_000;

/// What each instance knows of overrides, by `rule` and client key.
pub(crate) struct OverrideCache(Arc<LookupCache<Option<Quota>>>);

impl Default for OverrideCache {
    fn default() -> Self {
        Self(Arc::new(LookupCache::new(OVERRIDE_ENTRIES)))
    }
}

/// The cache's key of `key` under `rule` (rule names hold no `:`... nor `\n`).
fn id(rule: &str, key: &str) -> String {
    let mut id = String::with_capacity(rule.len() + 1 + key.len());
    id.push_str(rule);
    id.push('\n');
    id.push_str(key);
    id
}

impl Engine {
    /// Sets `quota` for the client `key` under the rule named `rule` in the store, for `ttl`
    /// (`None`: until cleared): every instance on the store decides the client's requests by
    /// it within a second (this one at once). The key is used as given (sanitized by the
    /// caller, as requests' keys are).
    ///
    /// # Errors
    ///
    /// The store's: it could not be reached in time, or keeps no overrides (a user's own
    /// [`Store`](crate::store::Store): [`StoreError::Unsupported`]).
    pub async fn set_quota(
        &self,
        rule: &str,
        key: &str,
        quota: Quota,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        (self.store)
            .set_quota_override(rule, key, Some(quota), ttl)
            .await?;
        let kept = ttl.map_or(OVERRIDE_TTL, |ttl| ttl.min(OVERRIDE_TTL));
        self.overrides.0.put(&id(rule, key), Some(quota), kept);
        Ok(())
    }

    /// Clears the quota set for the client `key` under the rule named `rule`: its requests
    /// are decided by its rule (or its lookup) again, on every instance within a second.
    ///
    /// # Errors
    ///
    /// As for [`set_quota`](Self::set_quota).
    pub async fn clear_quota(&self, rule: &str, key: &str) -> Result<(), StoreError> {
        (self.store)
            .set_quota_override(rule, key, None, None)
            .await?;
        self.overrides.0.put(&id(rule, key), None, OVERRIDE_TTL);
        Ok(())
    }

    /// The quota set for the client `key` under the rule named `rule`, read from the store
    /// now (not from this instance's cache).
    ///
    /// # Errors
    ///
    /// As for [`set_quota`](Self::set_quota).
    pub async fn read_quota(&self, rule: &str, key: &str) -> Result<Option<Quota>, StoreError> {
        let quota = self.store.quota_override(rule, key).await?;
        self.overrides.0.put(&id(rule, key), quota, OVERRIDE_TTL);
        Ok(quota)
    }

    /// The override of `key` under `rule` when this instance read it less than
    /// [`OVERRIDE_TTL`] ago: `Some(None)` for none set; `None` when it must be read
    /// ([`quota_override`](Self::quota_override)).
    pub(crate) fn override_ready(&self, rule: &str, key: &str) -> Option<Option<Quota>> {
        self.overrides.0.ready(&id(rule, key))
    }

    /// The override of `key` under `rule`: this instance's if read less than
    /// [`OVERRIDE_TTL`] ago, else read from the store, one read at a time per client (the
    /// others wait for it). A read that fails is answered with none, and asked again after
    /// [`OVERRIDE_TTL`] (the failure is the store's to count and log).
    pub(crate) async fn quota_override(&self, rule: &str, key: &str) -> Option<Quota> {
        let id = id(rule, key);
        // A read given up by its request (which then frees the key) is made again by one of
        // those that waited for it.
        for _ in 0..3 {
            let leader = match self.overrides.0.find(&id) {
                Found::Ready(quota) => return quota,
                Found::Waiting(waiter) => match waiter.answer(self.timeout).await {
                    Some(quota) => return quota,
                    None => continue,
                },
                Found::Leading(leader) => leader,
            };
            let quota = self.store.quota_override(rule, key).await.ok().flatten();
            leader.finish(quota, OVERRIDE_TTL);
            return quota;
        }
        self.store.quota_override(rule, key).await.ok().flatten()
    }
}
