//! The process's metrics recorder: Prometheus's, rendered on `/metrics` (and
//! `PROMETHEUS_ADDR`) and read by the statsd push.

use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};

/// How often the recorder folds the samples its histograms gathered into their summaries.
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Installs the recorder, and keeps it in shape for the life of the process.
pub(crate) fn install() -> Result<PrometheusHandle, BuildError> {
    let metrics = PrometheusBuilder::new().install_recorder()?;
    tokio::spawn(upkeep(metrics.clone()));
    Ok(metrics)
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
