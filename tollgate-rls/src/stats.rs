//! The reference's statistics as metrics, through the `metrics` facade,
//! named as its Prometheus mapping names them: `ratelimit_service_rate_limit_total_hits`
//! and friends, labelled `domain`, `key1` and `key2` from the statistics key
//! (`domain.key1.key2…`) after the reference's sanitizing, and the service's own counters.
//!
//! A limit's counters are looked up in the metrics recorder at its first request and kept
//! with the limit (a request then costs a few atomic adds). Statistics keys made of request
//! values (`detailed_metric`, `value_to_metric`, Envoy's own limits) are kept by [`Series`],
//! which bounds how many there are. So install the recorder before the service answers its
//! first request.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;

use super::counters::Handles;
use super::plan::{Item, Limited, Plan};
use super::response::Answer;
use super::series::Series;
use super::stat_name::Labels;

/// The share of a limit above which hits also count as near the limit, by default (the
/// reference's `NEAR_LIMIT_RATIO`).
pub(crate) const DEFAULT_NEAR_LIMIT_RATIO: f32 = 0.8;

/// How a service counts its answers: the bounded series of request values and the near-limit
/// ratio.
#[derive(Debug)]
pub(crate) struct Statistics {
    pub(crate) series: Series,
    pub(crate) near_limit_ratio: f32,
    pub(crate) calls: CallMetrics,
}

impl Statistics {
    /// Counts every limited descriptor of an answered request.
    pub(crate) fn record(&self, plan: &Plan<'_>, answer: &Answer) {
        let answered = (answer.response.statuses.iter())
            .zip(&answer.over)
            .zip(&answer.used_before);
        for (item, ((status, &over), &used_before)) in plan.items.iter().zip(answered) {
            if let Item::Limited(l) = item {
                record(self, l, status, over, used_before);
            }
        }
    }
}

/// The hits of one request on one limit, split as the reference's `base_limiter.go` splits
/// them (`GetResponseDescriptorStatus`, `checkOverLimitThreshold`,
/// `checkNearLimitThreshold`): only the part past a threshold counts as near or over.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Split {
    pub(crate) within: u64,
    pub(crate) near: u64,
    pub(crate) over: u64,
}

impl Split {
    /// `hits` on a limit of `limit` of which `used_before` were in use (`None`: not known,
    /// as when the store failed), `over` whether they were refused, with near-limit hits
    /// those past `floor(limit × ratio)`.
    pub(crate) fn of(
        hits: u64,
        limit: u32,
        used_before: Option<u64>,
        over: bool,
        ratio: f32,
    ) -> Self {
        let Some(before) = used_before else {
            return match over {
                true => Self {
                    over: hits,
                    ..Self::default()
                },
                false => Self {
                    within: hits,
                    ..Self::default()
                },
            };
        };
        let after = before.saturating_add(hits);
        let limit = u64::from(limit);
        // The reference's float32 product, floored.
        let near_threshold = (limit as f32 * ratio).floor() as u64;
        if over {
            let past = match before >= limit {
                true => hits,
                false => after.saturating_sub(limit),
            };
            let near = match before < limit {
                true => limit.saturating_sub(near_threshold.max(before)),
                false => 0,
            };
            // Refused with room apparently left (an algorithm whose remaining is not a
            // count): every hit was over.
            let over = if past == 0 { hits } else { past };
            Self {
                within: 0,
                near,
                over,
            }
        } else {
            let near = match (after > near_threshold, before >= near_threshold) {
                (false, _) => 0,
                (true, true) => hits,
                (true, false) => after - near_threshold,
            };
            Self {
                within: hits,
                near,
                over: 0,
            }
        }
    }
}

/// Counts one limited descriptor's hits by how it was answered: under its limit's own
/// counters, or under the bounded series when its statistics key is made of request values.
fn record(
    stats: &Statistics,
    limited: &Limited<'_>,
    status: &DescriptorStatus,
    over: bool,
    used_before: Option<u64>,
) {
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
                made = stats.series.handles(key);
                &*made
            }
        };
        let split = Split::of(
            hits,
            limited.limit.requests_per_unit,
            used_before,
            over,
            stats.near_limit_ratio,
        );
        handles.total.increment(hits);
        handles.within.increment(split.within);
        handles.near.increment(split.near);
        handles.over.increment(split.over);
        if over && status.code == Code::Ok as i32 {
            handles.shadow.increment(split.over);
        }
    }
}

/// Counts the `descriptors` of a request whose domain is not configured (the reference counts
/// each descriptor looked up: `src/config/config_impl.go`, `GetLimit`). The domain is not a
/// label: a client can send any number of them, of any length.
pub(crate) fn domain_not_found(descriptors: usize) {
    metrics::counter!("ratelimit_service_rate_limit_domain_not_found")
        .increment(descriptors as u64);
}

/// Counts a configuration load, good or bad.
pub(crate) fn config_load(ok: bool) {
    match ok {
        true => metrics::counter!("ratelimit_service_config_load_success").increment(1),
        false => metrics::counter!("ratelimit_service_config_load_error").increment(1),
    }
}

/// Counts a request answered without the store because it failed: the reference's
/// `ratelimit.service.call.should_rate_limit.redis_error`, mapped to
/// `ratelimit_service_should_rate_limit_error{err_type="redis_error"}`.
pub(crate) fn store_error() {
    metrics::counter!("ratelimit_service_should_rate_limit_error", "err_type" => "redis_error")
        .increment(1);
}

/// Counts a request refused as malformed (no domain, no descriptor) or answered before a
/// configuration is loaded: the reference's
/// `service_error`, as `ratelimit_service_should_rate_limit_error{err_type="service_error"}`.
pub(crate) fn service_error() {
    metrics::counter!("ratelimit_service_should_rate_limit_error", "err_type" => "service_error")
        .increment(1);
}

/// Where the per-call metrics are registered from, for the recorder.
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

static SHOULD_RATE_LIMIT: [metrics::Label; 1] = [metrics::Label::from_static_parts(
    "grpc_method",
    "ShouldRateLimit",
)];

/// The reference's gRPC server metrics (`src/metrics/metrics.go`, mapped by
/// `default_mapper.yaml`): `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`
/// counted as a call starts, and `ratelimit_service_response_time_seconds{grpc_method=…}`
/// recorded by [`CallTimer::finish`]. Looked up in the recorder at the first call and kept,
/// as a limit's counters are: a call then costs an atomic add and a histogram entry.
#[derive(Default)]
pub(crate) struct CallMetrics {
    handles: std::sync::OnceLock<(metrics::Counter, metrics::Histogram)>,
}

impl std::fmt::Debug for CallMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallMetrics")
    }
}

impl CallMetrics {
    fn handles(&self) -> &(metrics::Counter, metrics::Histogram) {
        static TOTAL: metrics::Key =
            metrics::Key::from_static_parts("ratelimit_service_total_requests", &SHOULD_RATE_LIMIT);
        static TIME: metrics::Key = metrics::Key::from_static_parts(
            "ratelimit_service_response_time_seconds",
            &SHOULD_RATE_LIMIT,
        );
        self.handles.get_or_init(|| {
            metrics::with_recorder(|r| {
                let total = r.register_counter(&TOTAL, &METADATA);
                (total, r.register_histogram(&TIME, &METADATA))
            })
        })
    }
}

/// One `ShouldRateLimit` call being timed (see [`CallMetrics`]).
#[derive(Debug)]
pub(crate) struct CallTimer<'a> {
    metrics: &'a CallMetrics,
    started: std::time::Instant,
}

impl<'a> CallTimer<'a> {
    /// Counts a `ShouldRateLimit` call and starts timing it.
    pub(crate) fn start(metrics: &'a CallMetrics) -> Self {
        {
            metrics.handles().0.increment(1);
            Self {
                metrics,
                started: std::time::Instant::now(),
            }
        }
    }

    /// Records how long the call took.
    pub(crate) fn finish(self) {
        (self.metrics.handles().1).record(self.started.elapsed().as_secs_f64());
    }
}

/// Counts a request that was over a limit and answered OK by the global shadow mode.
pub(crate) fn global_shadow_mode() {
    metrics::counter!("ratelimit_service_global_shadow_mode").increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's `base_limiter.go` (`GetResponseDescriptorStatus`, lines 98-131;
    /// `checkOverLimitThreshold`, lines 159-174; `checkNearLimitThreshold`, lines 176-188), on
    /// a limit of 10 with the default ratio (near from 8).
    #[test]
    fn hits_split_as_the_reference_splits_them() {
        let split = |hits, before, over| Split::of(hits, 10, Some(before), over, 0.8);
        let s = |within, near, over| Split { within, near, over };
        assert_eq!(split(1, 0, false), s(1, 0, 0));
        assert_eq!(split(1, 8, false), s(1, 1, 0));
        // Only the hits past the near threshold are near.
        assert_eq!(split(3, 7, false), s(3, 2, 0));
        assert_eq!(split(8, 0, false), s(8, 0, 0));
        // Only the hits past the limit are over; those between the thresholds are near.
        assert_eq!(split(3, 9, true), s(0, 1, 2));
        assert_eq!(split(10, 5, true), s(0, 2, 5));
        // Already over: every hit is over, none near.
        assert_eq!(split(4, 10, true), s(0, 0, 4));
        // Not known (the store failed): all within, or all over.
        assert_eq!(Split::of(3, 10, None, true, 0.8), s(0, 0, 3));
        assert_eq!(Split::of(3, 10, None, false, 0.8), s(3, 0, 0));
        // NEAR_LIMIT_RATIO moves the near threshold (floor(10 × 0.5) = 5).
        assert_eq!(Split::of(2, 10, Some(4), false, 0.5), s(2, 1, 0));
    }

    #[test]
    fn a_services_counters_take_the_part_past_each_threshold() {
        use super::super::{RateLimitService, RlsConfig};
        use crate::proto::RateLimitRequest;
        let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: day, requests_per_unit: 10 }\n";
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let service = RateLimitService::builder()
                    .config(
                        RlsConfig::from_yaml([("d.yaml", yaml)], crate::DuplicateDomains::Refuse)
                            .unwrap(),
                    )
                    .build()
                    .unwrap();
                for hits in [7, 5, 2] {
                    let request = RateLimitRequest {
                        domain: "d".into(),
                        descriptors: vec![super::super::tests::descriptor(&[("k", "v")])],
                        hits_addend: hits,
                    };
                    service.decide(&request).await.unwrap();
                }
            });
        });
        let text = handle.render();
        let count = |name: &str| -> u64 {
            let prefix = format!("ratelimit_service_rate_limit_{name}{{domain=\"d\",key1=\"k\"}} ");
            (text.lines())
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .map_or(0, |v| v.parse().unwrap())
        };
        // Every hit is charged, as the reference charges them: 7 within; 5 refused at 7 used
        // (12 after: 2 past the limit, 2 between 8 and 10, none within); 2 refused at 12 used,
        // all past the limit (base_limiter.go, checkOverLimitThreshold).
        assert_eq!(count("total_hits"), 14, "{text}");
        assert_eq!(count("within_limit"), 7);
        assert_eq!(count("near_limit"), 2);
        assert_eq!(count("over_limit"), 4);
    }
}
