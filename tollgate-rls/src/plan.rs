//! What a request asks: for each of its descriptors, the limit that applies (after the
//! reference's `unlimited` and `replaces`), the key it is counted under and its cost.

use std::borrow::Cow;
use std::collections::HashSet;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use smallvec::SmallVec;

use super::cache_key::cache_key;
use super::config::{policy_name, unit_seconds, Limit, RlsConfig};
use super::counters::Counters;
use super::matching::{client_key, override_key, LimitRef, Matched};
use tollgate::engine::{Ask, Charging};
use tollgate::key::sanitize;
use tollgate::store::Policy;
use tollgate::Algorithm;
use tollgate::Quota;

/// One value per descriptor of a request: most requests have a few, kept without an allocation.
pub(crate) type PerDescriptor<T> = SmallVec<[T; 4]>;

/// Settings that apply to every request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Modes {
    /// The reference's `SHADOW_MODE`: decide as usual, answer OK.
    pub(crate) shadow: bool,
    /// The reference's `QUOTA_MODE`: every limit is a quota.
    pub(crate) quota: bool,
    /// The reference's `RESPONSE_DYNAMIC_METADATA`: answers carry dynamic metadata.
    pub(crate) dynamic_metadata: bool,
    /// Which hits are charged (default: every hit, as the reference).
    pub(crate) charging: Charging,
    /// Whether fixed-window limits count in the reference's keys (plain counters, the
    /// default), or in tollgate's.
    pub(crate) reference_counters: bool,
}

impl Default for Modes {
    fn default() -> Self {
        Self {
            shadow: false,
            quota: false,
            dynamic_metadata: false,
            charging: Charging::default(),
            reference_counters: true,
        }
    }
}

/// One descriptor's part of the request.
#[derive(Debug)]
pub(crate) enum Item<'c> {
    /// No limit matched, or it was replaced: OK, with no numbers.
    NoLimit,
    /// `unlimited: true`: OK, with the most remaining there is.
    Unlimited,
    Limited(Limited<'c>),
}

/// A descriptor with a limit.
#[derive(Debug)]
pub(crate) struct Limited<'c> {
    pub(crate) limit: LimitRef<'c>,
    /// The counter's key: the reference's (without its window) for a plain counter, else
    /// tollgate's, sanitized for the store.
    pub(crate) key: String,
    /// Whether it counts in the reference's keys (its limit's `counter`), not tollgate's.
    pub(crate) plain: bool,
    pub(crate) stats_key: Cow<'c, str>,
    /// Units this request uses (0: look only).
    pub(crate) cost: u32,
    /// Whether it is a quota (its denial alone does not refuse the request).
    pub(crate) quota_mode: bool,
}

impl Limited<'_> {
    /// Whether its denial refuses the request.
    pub(crate) fn blocking(&self) -> bool {
        !self.limit.shadow_mode && !self.quota_mode
    }

    /// A limit of zero: refused without asking the store (unless it costs nothing).
    pub(crate) fn refused_locally(&self) -> bool {
        self.limit.policy.is_none() && self.cost > 0
    }
}

/// The request's descriptors, in order.
#[derive(Debug)]
pub(crate) struct Plan<'c> {
    pub(crate) items: Vec<Item<'c>>,
    /// The global quota mode, which also makes descriptors without a limit quotas.
    pub(crate) quota_mode: bool,
}

impl<'c> Plan<'c> {
    /// Looks up every descriptor of `request` in `config`; with the reference's counters on,
    /// the keys of fixed-window limits are the reference's, after `prefix` (its
    /// `CACHE_KEY_PREFIX`).
    pub(crate) fn new(
        config: &'c RlsConfig,
        request: &RateLimitRequest,
        modes: Modes,
        prefix: &str,
    ) -> Self {
        let domain = request.domain.as_str();
        let matched: PerDescriptor<Option<Matched<'c>>> = (request.descriptors.iter())
            .map(|d| match &d.limit {
                Some(limit) if config.has_domain(domain) => override_limit(domain, d, limit),
                _ => config.get_limit(domain, d).ok().flatten(),
            })
            .collect();
        // Every name a matched limit replaces, unlimited ones included (most limits replace
        // none: then no set is made).
        let replacing = (matched.iter().flatten()).any(|m| !m.limit.replaces.is_empty());
        let replaced: HashSet<String> = match replacing {
            true => (matched.iter().flatten())
                .flat_map(|m| m.limit.replaces.iter().cloned())
                .collect(),
            false => HashSet::new(),
        };
        let items = (matched.into_iter().zip(&request.descriptors))
            .map(|(m, d)| match m {
                None => Item::NoLimit,
                Some(m) if m.limit.unlimited => Item::Unlimited,
                Some(m) if !m.limit.name.is_empty() && replaced.contains(m.limit.name.as_str()) => {
                    Item::NoLimit
                }
                Some(m) => Item::Limited(Limited {
                    plain: modes.reference_counters && m.limit.counter.is_some(),
                    key: match modes.reference_counters && m.limit.counter.is_some() {
                        true => cache_key(prefix, domain, d, &m.shared),
                        false => sanitize(client_key(domain, d, &m.shared)),
                    },
                    quota_mode: modes.quota || m.limit.quota_mode,
                    cost: cost(request, d),
                    limit: m.limit,
                    stats_key: m.stats_key,
                }),
            })
            .collect();
        Self {
            items,
            quota_mode: modes.quota,
        }
    }

    /// The limits to ask the store about, in the order of the descriptors that have one.
    pub(crate) fn asks(&self) -> PerDescriptor<Ask<'_>> {
        self.limited()
            .filter_map(|l| {
                let policy = match l.plain {
                    true => l.limit.counter.as_ref()?,
                    false => l.limit.policy.as_ref()?,
                };
                Some(Ask::new(&l.key, policy, l.cost).blocking(l.blocking()))
            })
            .collect()
    }

    /// Whether a blocking limit of zero refuses the request before any store is asked.
    pub(crate) fn refused_locally(&self) -> bool {
        self.limited().any(|l| l.blocking() && l.refused_locally())
    }

    fn limited(&self) -> impl Iterator<Item = &Limited<'c>> {
        self.items.iter().filter_map(|item| match item {
            Item::Limited(l) => Some(l),
            _ => None,
        })
    }
}

/// The units a descriptor uses: its own `hits_addend` if set (0 included), else the
/// request's, where 0 means 1. A descriptor whose hits give quota back (`is_negative_hits`)
/// uses none: nothing is given back, nothing is taken.
fn cost(request: &RateLimitRequest, d: &RateLimitDescriptor) -> u32 {
    if d.is_negative_hits {
        return 0;
    }
    match &d.hits_addend {
        Some(hits) => u32::try_from(hits.value).unwrap_or(u32::MAX),
        None => request.hits_addend.max(1),
    }
}

/// The limit Envoy sent with the descriptor, as a fixed window like the reference's; `None`
/// (no limit) when its unit is unknown or the quota is outside what tollgate can count.
fn override_limit<'c>(
    domain: &str,
    d: &RateLimitDescriptor,
    limit: &RateLimitOverride,
) -> Option<Matched<'c>> {
    let unit = Unit::try_from(limit.unit)
        .ok()
        .filter(|u| *u != Unit::Unknown)?;
    let policy = match limit.requests_per_unit {
        0 => None,
        n => {
            let period = std::time::Duration::from_secs(unit_seconds(unit));
            let quota = Quota::new(n, period).ok()?;
            Some(Policy::new(policy_name(period), quota, Algorithm::FixedWindow).ok()?)
        }
    };
    let counter = policy.clone().and_then(|p| p.with_plain_counter().ok());
    Some(Matched {
        limit: LimitRef::Owned(Box::new(Limit {
            full_key: override_key(domain, d),
            requests_per_unit: limit.requests_per_unit,
            unit,
            name: String::new(),
            replaces: Vec::new(),
            unlimited: false,
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            policy,
            counter,
            metadata: None,
            counters: Counters::default(),
        })),
        stats_key: Cow::Owned(override_key(domain, d)),
        shared: Vec::new(),
    })
}
