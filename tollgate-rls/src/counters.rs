//! [`Counters`]: a limit's statistics counters, found in the metrics recorder at its first
//! request and kept with the limit, and [`Handles`], one statistics key's counters (see
//! [`stats`](super::stats) for what they count).

use std::fmt;
use std::sync::OnceLock;

use super::stat_name::Labels;

/// A limit's counters, once its first request has found them.
#[derive(Default)]
pub(crate) struct Counters {
    pub(super) found: OnceLock<Handles>,
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
pub(crate) struct Handles {
    pub(super) total: metrics::Counter,
    pub(super) over: metrics::Counter,
    pub(super) near: metrics::Counter,
    pub(super) within: metrics::Counter,
    pub(super) shadow: metrics::Counter,
}

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
