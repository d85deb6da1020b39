//! The process's metrics recorder: Prometheus's, rendered on `/metrics` (and
//! `PROMETHEUS_ADDR`) and read by the statsd push. The response time is a histogram of the
//! mapping's buckets (the reference's default mapping: Prometheus's default buckets, in
//! seconds); another mapping renames the reference's series as they are registered
//! (`crate::mapper`). The process's own series (`process_cpu_seconds_total`, …) are read
//! from the system at each render, as the reference's Prometheus client exports Go's.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::mapper::{Mapped, MappedRecorder, Mapper, DEFAULT_BUCKETS};
use crate::statsd::StatKind;

/// How often the recorder folds the samples its histograms gathered into their summaries.
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The response time, as the reference's statsd names it (its `src/metrics/metrics.go`).
const RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";

/// The process's own series, read at each render.
static PROCESS: OnceLock<metrics_process::Collector> = OnceLock::new();

/// Installs the recorder, with `mapping` (a statsd_exporter mapping's YAML, already checked)
/// instead of the default one, and keeps it in shape for the life of the process.
pub(crate) fn install(mapping: Option<&str>) -> Result<PrometheusHandle, String> {
    let mapper = mapping.map(Mapper::from_yaml).transpose()?;
    let (time, buckets) = match &mapper {
        None => (
            "ratelimit_service_response_time_seconds".to_owned(),
            Some(DEFAULT_BUCKETS.to_vec()),
        ),
        Some(mapper) => match mapper.map(RESPONSE_TIME, StatKind::Timer) {
            Mapped::Series { name, buckets, .. } => (name, buckets),
            Mapped::Drop => (String::new(), None),
        },
    };
    let mut builder = PrometheusBuilder::new();
    if let Some(buckets) = buckets {
        builder = (builder.set_buckets_for_metric(Matcher::Full(time), &buckets))
            .map_err(|e| e.to_string())?;
    }
    let recorder = builder.build_recorder();
    let metrics = recorder.handle();
    let installed = match mapper {
        None => metrics::set_global_recorder(recorder).map_err(|e| e.to_string()),
        Some(mapper) => {
            let mapped = MappedRecorder {
                inner: recorder,
                mapper,
            };
            metrics::set_global_recorder(mapped).map_err(|e| e.to_string())
        }
    };
    installed?;
    let process = PROCESS.get_or_init(metrics_process::Collector::default);
    process.describe();
    tokio::spawn(upkeep(metrics.clone()));
    Ok(metrics)
}

/// The metrics' text now, the process's series read first.
pub(crate) fn render(metrics: &PrometheusHandle) -> String {
    if let Some(process) = PROCESS.get() {
        process.collect();
    }
    metrics.render()
}

/// Keeps the recorder's memory flat when nobody scrapes `/metrics`: histogram samples pile up
/// until a render or an upkeep folds them in, and operators who never scrape are common.
async fn upkeep(metrics: PrometheusHandle) {
    let mut every = tokio::time::interval(UPKEEP_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        metrics.run_upkeep();
    }
}
