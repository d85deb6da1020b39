//! [`Series`]: the statistics series made of request values (`detailed_metric`,
//! `value_to_metric`, Envoy's own limits), bounded. Clients choose those values, so each new
//! one would otherwise add a series to `/metrics` for good; past the bound, hits are counted
//! in one overflow series instead.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::counters::Handles;
use super::stat_name::Labels;

/// How many series request values may make, by default.
pub(crate) const DEFAULT_MAX_SERIES: usize = 1_000;

/// The series made of request values so far, at most `max` of them.
pub(crate) struct Series {
    max: usize,
    made: Mutex<HashMap<Labels, Arc<Handles>>>,
    overflow: OnceLock<Arc<Handles>>,
}

impl Series {
    /// Room for `max` series made of request values.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            made: Mutex::new(HashMap::new()),
            overflow: OnceLock::new(),
        }
    }

    /// The counters for `stats_key`: its own series if it has one or there is room for it,
    /// else the overflow series.
    pub(crate) fn handles(&self, stats_key: &str) -> Arc<Handles> {
        let labels = Labels::of(stats_key);
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(handles) = made.get(&labels) {
            return Arc::clone(handles);
        }
        if made.len() < self.max {
            let handles = Arc::new(Handles::new(&labels));
            made.insert(labels, Arc::clone(&handles));
            return handles;
        }
        drop(made);
        Arc::clone(self.overflow.get_or_init(|| Arc::new(Handles::overflow())))
    }
}

impl fmt::Debug for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Series")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::super::tests::descriptor;
    use super::super::{RateLimitService, RlsConfig};
    use crate::proto::{RateLimitRequest, UInt64Value};
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;

    const YAML: &str = "\
domain: edge
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: { unit: hour, requests_per_unit: 1000 }
  - key: remote_address
    rate_limit: { unit: hour, requests_per_unit: 1000 }
";

    fn request(domain: &str, entries: &[(&str, &str)]) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.into(),
            descriptors: vec![descriptor(entries)],
            hits_addend: 0,
        }
    }

    /// Runs `test` on a service with room for `max` series and a recorder of its own; what
    /// the recorder renders after.
    fn rendered(max: usize, requests: Vec<RateLimitRequest>) -> String {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let config =
                    RlsConfig::from_yaml([("edge.yaml", YAML)], crate::DuplicateDomains::Refuse)
                        .unwrap();
                let service = RateLimitService::builder()
                    .config(config)
                    .stats_max_series(max)
                    .build()
                    .unwrap();
                for request in &requests {
                    service.decide(request).await.unwrap();
                }
            });
        });
        handle.render()
    }

    fn lines<'a>(text: &'a str, metric: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{metric}{{")))
            .collect()
    }

    #[test]
    fn detailed_values_past_the_bound_count_in_one_overflow_series() {
        let requests = (0..50)
            .map(|i| request("edge", &[("user", &format!("u{i}"))]))
            .collect();
        let text = rendered(10, requests);
        let hits = lines(&text, "ratelimit_service_rate_limit_total_hits");
        assert_eq!(hits.len(), 11, "{hits:#?}");
        assert!(hits.contains(
            &"ratelimit_service_rate_limit_total_hits{domain=\"edge\",key1=\"user_u0\"} 1"
        ));
        assert!(
            hits.contains(&"ratelimit_service_rate_limit_total_hits{overflow=\"true\"} 40"),
            "{hits:#?}"
        );
        // A value seen again keeps its series.
        let again = (0..30)
            .map(|i| request("edge", &[("user", &format!("u{}", i % 3))]))
            .collect();
        let text = rendered(2, again);
        let hits = lines(&text, "ratelimit_service_rate_limit_total_hits");
        assert!(hits.contains(
            &"ratelimit_service_rate_limit_total_hits{domain=\"edge\",key1=\"user_u0\"} 10"
        ));
        assert!(hits.contains(&"ratelimit_service_rate_limit_total_hits{overflow=\"true\"} 10"));
    }

    #[test]
    fn envoys_own_limits_are_bounded_too() {
        let requests = (0..20)
            .map(|i| {
                let mut r = request("edge", &[("path", &format!("/p{i}"))]);
                r.descriptors[0].limit = Some(RateLimitOverride {
                    requests_per_unit: 5,
                    unit: 3,
                });
                r.descriptors[0].hits_addend = Some(UInt64Value { value: 1 });
                r
            })
            .collect();
        let text = rendered(5, requests);
        let hits = lines(&text, "ratelimit_service_rate_limit_total_hits");
        assert_eq!(hits.len(), 6, "{hits:#?}");
        assert!(hits.contains(&"ratelimit_service_rate_limit_total_hits{overflow=\"true\"} 15"));
    }

    #[test]
    fn unknown_domains_are_counted_without_their_name() {
        let requests = (0..20)
            .map(|i| request(&format!("{i}{}", "d".repeat(200)), &[("user", "a")]))
            .collect();
        let text = rendered(1_000, requests);
        assert!(
            text.contains("\nratelimit_service_rate_limit_domain_not_found 20\n"),
            "{text}"
        );
        assert!(!text.contains("ddd"), "{text}");
    }

    #[test]
    fn configured_keys_are_sanitized_and_outside_the_bound() {
        let requests = vec![
            request("edge", &[("remote_address", "10.0.0.1")]),
            request("edge", &[("user", "10.1.2.3")]),
        ];
        let text = rendered(0, requests);
        let hits = lines(&text, "ratelimit_service_rate_limit_total_hits");
        assert!(hits.contains(
            &"ratelimit_service_rate_limit_total_hits{domain=\"edge\",key1=\"remote_address\"} 1"
        ), "{hits:#?}");
        assert!(hits.contains(&"ratelimit_service_rate_limit_total_hits{overflow=\"true\"} 1"));
        let text = rendered(5, vec![request("edge", &[("user", "10.1.2.3")])]);
        assert!(text.contains("key1=\"user_10_1_2_3\"} 1"), "{text}");
    }
}
