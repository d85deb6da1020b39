//! The reference's statistics as metrics (with the `metrics` feature; nothing without it),
//! named as its Prometheus mapping names them: `ratelimit_service_rate_limit_total_hits`
//! and friends, labelled `domain`, `key1` and `key2` from the statistics key
//! (`domain.key1.key2…`) after the reference's sanitizing, and the service's own counters.
//!
//! A limit's counters are looked up in the metrics recorder at its first request and kept
//! with the limit (a request then costs a few atomic adds). Statistics keys made of request
//! values (`detailed_metric`, `value_to_metric`, Envoy's own limits) are kept by [`Series`],
//! which bounds how many there are. So install the recorder before the service answers its
//! first request.

use std::fmt;
#[cfg(feature = "metrics")]
use std::sync::OnceLock;

#[cfg(feature = "metrics")]
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;

use super::plan::Limited;
use super::series::Series;
#[cfg(feature = "metrics")]
use super::stat_name::Labels;

/// The share of a limit above which hits also count as near the limit (the reference's
/// default `NEAR_LIMIT_RATIO`).
#[cfg(feature = "metrics")]
const NEAR_LIMIT_RATIO: f64 = 0.8;

/// A limit's counters, once its first request has found them.
#[derive(Default)]
pub(crate) struct Counters {
    #[cfg(feature = "metrics")]
    found: OnceLock<Handles>,
}

impl Clone for Counters {
    /// A copy of a limit finds its own (the same ones, for the same statistics key).
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl fmt::Debug for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Counters")
    }
}

/// One statistics key's counters.
#[cfg(feature = "metrics")]
pub(crate) struct Handles {
    total: metrics::Counter,
    over: metrics::Counter,
    near: metrics::Counter,
    within: metrics::Counter,
    shadow: metrics::Counter,
}

#[cfg(feature = "metrics")]
impl Handles {
    /// The counters of the series labelled `labels`.
    pub(crate) fn new(labels: &Labels) -> Self {
        let mut list = vec![
            ("domain", labels.domain.clone()),
            ("key1", labels.key1.clone()),
        ];
        if let Some(key2) = &labels.key2 {
            list.push(("key2", key2.clone()));
        }
        Self::labelled(&list)
    }

    /// The counters of the one series that counts what is past [`Series`]' bound, labelled
    /// `overflow="true"` (a label no statistics key has).
    pub(crate) fn overflow() -> Self {
        Self::labelled(&[("overflow", "true".to_owned())])
    }

    fn labelled(labels: &[(&'static str, String)]) -> Self {
        Self {
            total: metrics::counter!("ratelimit_service_rate_limit_total_hits", labels),
            over: metrics::counter!("ratelimit_service_rate_limit_over_limit", labels),
            near: metrics::counter!("ratelimit_service_rate_limit_near_limit", labels),
            within: metrics::counter!("ratelimit_service_rate_limit_within_limit", labels),
            shadow: metrics::counter!("ratelimit_service_rate_limit_shadow_mode", labels),
        }
    }
}

/// Counts one limited descriptor's hits by how it was answered: under its limit's own
/// counters, or under the series of `series` when its statistics key is made of request
/// values.
pub(crate) fn record(
    series: &Series,
    limited: &Limited<'_>,
    status: &DescriptorStatus,
    over: bool,
) {
    #[cfg(feature = "metrics")]
    {
        let hits = u64::from(limited.cost);
        if hits == 0 {
            return;
        }
        let made;
        let handles = match &limited.stats_key {
            std::borrow::Cow::Borrowed(key) => limited
                .limit
                .counters
                .found
                .get_or_init(|| Handles::new(&Labels::of(key))),
            std::borrow::Cow::Owned(key) => {
                made = series.handles(key);
                &*made
            }
        };
        handles.total.increment(hits);
        if over {
            handles.over.increment(hits);
            if status.code == Code::Ok as i32 {
                handles.shadow.increment(hits);
            }
        } else {
            handles.within.increment(hits);
            let limit = f64::from(limited.limit.requests_per_unit);
            let used = limit - f64::from(status.limit_remaining);
            if status.current_limit.is_some() && used > (limit * NEAR_LIMIT_RATIO).floor() {
                handles.near.increment(hits);
            }
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (
        series,
        &limited.stats_key,
        &limited.limit.counters,
        status,
        over,
    );
}

/// Counts a request whose domain is not configured. The domain is not a label: a client
/// can send any number of them, of any length.
pub(crate) fn domain_not_found() {
    #[cfg(feature = "metrics")]
    metrics::counter!("ratelimit_service_rate_limit_domain_not_found").increment(1);
}

/// Counts a configuration load, good or bad.
pub(crate) fn config_load(ok: bool) {
    #[cfg(feature = "metrics")]
    match ok {
        true => metrics::counter!("ratelimit_service_config_load_success").increment(1),
        false => metrics::counter!("ratelimit_service_config_load_error").increment(1),
    }
    #[cfg(not(feature = "metrics"))]
    let _ = ok;
}

/// Counts a request answered without the store because it failed.
pub(crate) fn store_error() {
    #[cfg(feature = "metrics")]
    metrics::counter!("ratelimit_service_call_should_rate_limit_redis_error").increment(1);
}

/// Counts a request that was over a limit and answered OK by the global shadow mode.
pub(crate) fn global_shadow_mode() {
    #[cfg(feature = "metrics")]
    metrics::counter!("ratelimit_service_global_shadow_mode").increment(1);
}
