//! Metrics through the `metrics` facade (with the `metrics` feature; without it every function
//! here does nothing and compiles away). Labels are bounded: rule and store names, never a
//! client key.

use std::sync::Arc;

/// What became of one request under one rule, the `outcome` label of
/// `tollgate_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    ShadowDenied,
    Skipped,
    StoreError,
}

impl Outcome {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::Skipped => "skipped",
            Outcome::StoreError => "store_error",
        }
    }
}

/// The `rule` label of requests skipped before any rule was matched (skip paths, the skip
/// function, `[[skip]]`): no rule name can be `*`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const NO_RULE: &str = "*";

/// Where tollgate's counters and histograms are registered from, for the recorder.
#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// A policy as `tollgate_requests_total` counts it: the `rule` label, and the keys made of it
/// (see [`RequestKeys`]).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) trait Metered {
    /// The rule's name, shared (a label without a copy).
    fn rule(&self) -> &Arc<str>;
    /// Its keys of `tollgate_requests_total`.
    fn request_keys(&self) -> &RequestKeys;
}

/// Counts one request's outcome under the rule of `policy`.
///
/// The counter's key (name and labels) is made once per policy and outcome, and kept in the
/// policy (see [`RequestKeys`]): counting builds no list of labels and hashes nothing. The
/// recorder is still asked on every count, so one installed after the first request counts too.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[inline]
pub(crate) fn request(policy: &impl Metered, outcome: Outcome) {
    #[cfg(feature = "metrics")]
    {
        let key = policy.request_keys().key(policy.rule(), outcome);
        metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA)).increment(1);
    }
}

/// A policy's keys of `tollgate_requests_total`, one per outcome, each made on its first use
/// and shared by the policy's clones (and a rule's tiers). Not part of what makes two policies
/// equal.
#[derive(Clone, Default)]
pub(crate) struct RequestKeys {
    #[cfg(feature = "metrics")]
    keys: Arc<[std::sync::OnceLock<metrics::Key>; OUTCOMES]>,
}

/// How many [`Outcome`]s there are.
#[cfg(feature = "metrics")]
const OUTCOMES: usize = 5;

impl RequestKeys {
    /// The key of `outcome`'s count under the rule named `rule` (whose keys these are).
    #[cfg(feature = "metrics")]
    #[inline]
    fn key(&self, rule: &Arc<str>, outcome: Outcome) -> &metrics::Key {
        let index = (outcome as usize).min(OUTCOMES - 1);
        self.keys[index].get_or_init(|| {
            let labels = vec![
                metrics::Label::new("rule", Arc::clone(rule)),
                metrics::Label::new("outcome", outcome.as_str()),
            ];
            metrics::Key::from_parts("tollgate_requests_total", labels)
        })
    }
}

impl PartialEq for RequestKeys {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RequestKeys {}

impl std::fmt::Debug for RequestKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestKeys").finish_non_exhaustive()
    }
}

/// Counts one request skipped before any rule was matched (rule `*`).
pub(crate) fn skipped() {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "tollgate_requests_total",
        "rule" => NO_RULE,
        "outcome" => Outcome::Skipped.as_str()
    )
    .increment(1);
}

/// A store's key of `tollgate_store_duration_seconds`, made on its first use (as
/// [`RequestKeys`] are, and for the same reason).
#[derive(Default)]
pub(crate) struct DurationKey {
    #[cfg(feature = "metrics")]
    key: std::sync::OnceLock<metrics::Key>,
}

impl DurationKey {
    /// Records how long one call to the store labelled `store` took (answered or failed).
    #[cfg(feature = "metrics")]
    pub(crate) fn record(&self, store: &Arc<str>, seconds: f64) {
        let key = self.key.get_or_init(|| {
            let labels = vec![metrics::Label::new("store", Arc::clone(store))];
            metrics::Key::from_parts("tollgate_store_duration_seconds", labels)
        });
        metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA))
            .record(seconds);
    }
}

impl std::fmt::Debug for DurationKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurationKey").finish_non_exhaustive()
    }
}

/// Sets whether the store's circuit breaker is open (1) or closed (0).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn circuit_open(store: &Arc<str>, open: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("tollgate_circuit_open", "store" => Arc::clone(store)).set(if open {
        1.0
    } else {
        0.0
    });
}

/// Counts one request decided by the in-memory fallback while the store was away.
pub(crate) fn fallback_decision() {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_fallback_decisions_total").increment(1);
}

/// Counts one failed reload of a rules file (each distinct failure once: the watcher does not
/// count the same failure at every look).
pub(crate) fn rules_reload_failure() {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_rules_reload_failures_total").increment(1);
}

/// Counts one request answered from the cache of denials.
pub(crate) fn denial_cache_hit() {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_denial_cache_hits_total").increment(1);
}

/// Counts one lease asked of the store for `rule`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn lease_call(rule: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_lease_calls_total", "rule" => rule.to_owned()).increment(1);
}

/// Counts units of quota leased from the store for `rule`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn lease_tokens_granted(rule: &str, units: u32) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_lease_tokens_granted_total", "rule" => rule.to_owned())
        .increment(u64::from(units));
}

/// Counts unused leased units the store took back for `rule`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn lease_tokens_returned(rule: &str, units: u32) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_lease_tokens_returned_total", "rule" => rule.to_owned())
        .increment(u64::from(units));
}

/// Counts leased units that expired unused and could not be given back for `rule` (their
/// slots had passed, their window had ended, or the store failed).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn lease_tokens_expired(rule: &str, units: u32) {
    #[cfg(feature = "metrics")]
    if units > 0 {
        metrics::counter!("tollgate_lease_tokens_expired_total", "rule" => rule.to_owned())
            .increment(u64::from(units));
    }
}

/// Counts one quota lookup made for `rule` (see `rules::QuotaLookup`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn quota_lookup(rule: &Arc<str>) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_quota_lookups_total", "rule" => Arc::clone(rule)).increment(1);
}

/// Counts one request of `rule` whose quota came from a lookup's cache (or another request's
/// lookup), without a lookup of its own.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn quota_lookup_cache_hit(rule: &Arc<str>) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_quota_lookup_cache_hits_total", "rule" => Arc::clone(rule))
        .increment(1);
}

/// Counts one quota lookup for `rule` that failed (`reason` `error`) or timed out
/// (`timeout`), answered with the rule's own quota.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn quota_lookup_failure(rule: &Arc<str>, reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "tollgate_quota_lookup_failures_total",
        "rule" => Arc::clone(rule),
        "reason" => reason
    )
    .increment(1);
}

/// Moves the `tollgate_in_flight{rule}` gauge, the slots of requests in flight this instance
/// holds under the rule, by `delta` (1 taken, -1 given back).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn slots_held(rule: &Arc<str>, delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("tollgate_in_flight", "rule" => Arc::clone(rule)).increment(delta);
}

/// The `store` label for a store type: its name without the path and the `Store` suffix, in
/// snake case (`MemoryStore` → `memory`, a user's `PostgresCacheStore` → `postgres_cache`).
pub(crate) fn store_label<S>() -> Arc<str> {
    let full = std::any::type_name::<S>();
    let name = full.split('<').next().unwrap_or(full);
    let name = name.rsplit("::").next().unwrap_or(name);
    let name = name
        .strip_suffix("Store")
        .filter(|n| !n.is_empty())
        .unwrap_or(name);
    let mut label = String::with_capacity(name.len() + 2);
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            label.push('_');
        }
        label.extend(c.to_lowercase());
    }
    label.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn store_labels_are_short_lower_case_type_names() {
        assert_eq!(&*store_label::<MemoryStore>(), "memory");
        struct MyStore;
        assert_eq!(&*store_label::<MyStore>(), "my");
        assert_eq!(&*store_label::<Vec<u8>>(), "vec");
        struct PostgresCacheStore;
        assert_eq!(&*store_label::<PostgresCacheStore>(), "postgres_cache");
        assert_eq!(Outcome::ShadowDenied.as_str(), "shadow_denied");
    }
}
