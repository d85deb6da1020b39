//! Starting and running the server, in steps: the settings are read (`crate::settings`), the
//! store they name is built (`crate::store`), then the service (`service.rs`), then the
//! listeners (`crate::listen`), once Redis answers; once the server says it listens, it serves
//! until a stop signal (`servers.rs`). Around them: logging, the runtime's threads, the metrics recorder,
//! health, and the HTTP endpoints.

mod debug;
mod error;
mod health;
mod http;
mod json_log;
mod logging;
mod metrics;
mod runtime;
mod servers;
mod service;
mod signal;

use std::io::Write as _;
use std::process::ExitCode;

use crate::listen::{self, Listeners};
use crate::settings::Settings;
use crate::store::{self, BuiltStore};

pub(crate) use error::StartError;

/// Sets up logging and the runtime `settings` ask for, and serves on it until stopped.
pub(crate) fn start(settings: Settings) -> Result<ExitCode, StartError> {
    logging::init(&settings.process).map_err(StartError::Logging)?;
    let runtime = runtime::build(settings.process.worker_threads).map_err(StartError::Runtime)?;
    runtime.block_on(run(settings))
}

/// The steps from the settings to serving.
async fn run(settings: Settings) -> Result<ExitCode, StartError> {
    for (name, why) in &settings.ignored {
        tracing::warn!("{name} is ignored: {why}");
    }
    let mapping = settings
        .stats
        .prometheus
        .as_ref()
        .and_then(|p| p.mapping.as_deref());
    let metrics = metrics::install(mapping).map_err(StartError::Metrics)?;
    let traces = (settings.traces.as_ref())
        .map(crate::traces::install)
        .transpose()
        .map_err(StartError::Traces)?;
    let store = store::build(&settings.store).await?;
    let service = service::build(&settings, &store).map_err(StartError::Config)?;
    if let Some(redis) = store.redis() {
        tokio::spawn(store::publish_pool_size(redis.clone()));
    }
    if let Some(push) = settings.stats.statsd.clone() {
        crate::statsd::spawn(push, metrics.clone()).map_err(StartError::Statsd)?;
    }
    // Before the `listening` line: a SIGTERM right after it must find the handler in place.
    let mut signal = Box::pin(signal::stop_signal());
    // Nothing listens before Redis answers, as in the reference (its runner.go creates the
    // limiter, which waits for Redis, before `srv.Start`).
    if let Some(redis) = store.redis() {
        let (timeout, retry) = (settings.store.timeout, settings.store.startup);
        tokio::select! {
            waited = health::wait_for_store(redis, store.described(), timeout, retry) => waited?,
            () = &mut signal => return Ok(ExitCode::SUCCESS),
        }
    }
    if !service::wait_for_first_config(&settings.config, &service, &mut signal).await {
        return Ok(ExitCode::SUCCESS);
    }
    let stats = &settings.stats;
    let listeners = listen::bind_all(&settings.server, stats.prometheus.as_ref()).await?;
    announce(&listeners, &store);
    service::log_config(&settings.config, &service);
    let redis = store.redis().cloned();
    let ended = servers::until_stopped(&settings, service, redis, listeners, metrics, signal).await;
    if let Some(provider) = traces {
        crate::traces::shut_down(provider).await;
    }
    ended
}

/// The one line on stdout: `tollgate-rls listening on grpc=ADDR http=ADDR debug=ADDR
/// store=…`, which scripts and tests wait for.
fn announce(listeners: &Listeners, store: &BuiltStore) {
    println!(
        "tollgate-rls listening on grpc={} http={} debug={} store={}",
        listeners.grpc.address(),
        listen::address(&listeners.main),
        listen::address(&listeners.debug),
        store.described(),
    );
    let _ = std::io::stdout().flush();
}
