//! What the configuration says of a bucket: a blanket answer, or a limit to take quota from.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::store::Policy;

use super::bucket::{descriptor, BucketKey};
use crate::plan::{Item, Plan};
use crate::service::RateLimitService;

/// How a bucket is answered.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// No configuration loaded yet: nothing is assigned, Envoy applies its own behaviours.
    NoConfig,
    /// No limit matches, `unlimited`, `shadow_mode` (or the global shadow mode), or a quota
    /// (`quota_mode`): `ALLOW_ALL`.
    AllowAll,
    /// A limit of zero: `DENY_ALL`.
    DenyAll,
    /// A limit: quota is taken from the store under `key` and `policy`; `family` is the
    /// limit's name in the configuration (`domain.key_value.key`), a statistics label.
    Limited {
        key: String,
        policy: Policy,
        family: String,
    },
}

/// The target of the bucket `key` of `domain`, as `ShouldRateLimit` would match its
/// descriptor (same keys, so both protocols count against one counter).
pub(crate) fn target(service: &RateLimitService, domain: &str, key: &BucketKey) -> Target {
    let inner = &service.inner;
    if !inner.config.loaded() {
        return Target::NoConfig;
    }
    if inner.modes.shadow {
        return Target::AllowAll;
    }
    let config = inner.config.current();
    let request = RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![descriptor(key)],
        hits_addend: 1,
    };
    let plan = Plan::new(&config, &request, inner.modes, &inner.cache_key_prefix);
    match plan.items.first() {
        Some(Item::Limited(l)) if l.limit.shadow_mode || l.quota_mode => Target::AllowAll,
        Some(Item::Limited(l)) => {
            let policy = match l.plain {
                true => l.limit.counter.clone(),
                false => l.limit.policy.clone(),
            };
            match policy {
                Some(policy) => Target::Limited {
                    key: l.key.clone(),
                    policy,
                    family: l.limit.full_key.clone(),
                },
                None => Target::DenyAll,
            }
        }
        _ => Target::AllowAll,
    }
}
