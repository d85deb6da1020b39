//! The rate limit service the settings describe, deciding with the built store; and, with an
//! xDS control plane, the wait for its first configuration.

use std::future::Future;

use tollgate_rls::{RateLimitService, ResponseHeaders, RlsConfig, XdsSource};

use crate::settings::{Config, ConfigSource, Settings};
use crate::store::BuiltStore;

/// The service `settings` describe, deciding with `store`. A configuration directory that
/// does not load is an error (unless `FORCE_START_WITHOUT_INITIAL_CONFIG`).
pub(crate) fn build(
    settings: &Settings,
    store: &BuiltStore,
) -> Result<RateLimitService, tollgate::ConfigError> {
    let (config, answers, stats) = (&settings.config, &settings.answers, &settings.stats);
    let builder = match &config.source {
        ConfigSource::Xds(xds) => RateLimitService::builder().config_xds(XdsSource::clone(xds)),
        ConfigSource::Dir(dir) => RateLimitService::builder().config_dir(dir),
        ConfigSource::Nothing => RateLimitService::builder().config(RlsConfig::default()),
    };
    let mut builder = (store.serve(builder))
        .merge_domains(config.merge_domains)
        .serve_before_config(config.force_start)
        .ignore_dot_files(config.ignore_dot_files)
        .store_timeout(settings.store.timeout)
        .charging(answers.charging)
        .shadow_mode(answers.shadow_mode)
        .quota_mode(answers.quota_mode)
        .response_dynamic_metadata(answers.dynamic_metadata)
        .stats_max_series(stats.max_series)
        .near_limit_ratio(stats.near_limit_ratio)
        .trace_requests(settings.traces.is_some());
    if let Some(policy) = settings.store.on_error {
        // Unset: the reference's answer, a gRPC error.
        builder = builder.on_store_error(policy);
    }
    if let Some([limit, remaining, reset]) = &answers.headers {
        builder = builder.response_headers(ResponseHeaders::new(limit, remaining, reset));
    }
    builder.build()
}

/// With an xDS control plane and without `FORCE_START_WITHOUT_INITIAL_CONFIG`, waits for its
/// first configuration, as the reference's `NewService` does. `false` when `stop` (a stop
/// signal) came first.
pub(crate) async fn wait_for_first_config(
    config: &Config,
    service: &RateLimitService,
    stop: impl Future<Output = ()>,
) -> bool {
    if !matches!(config.source, ConfigSource::Xds(_)) || config.force_start {
        return true;
    }
    tracing::info!("waiting for the first configuration from the xDS control plane");
    tokio::select! {
        () = service.wait_for_config() => true,
        () = stop => false,
    }
}

/// Logs where the configuration in force came from, once the server listens.
pub(crate) fn log_config(config: &Config, service: &RateLimitService) {
    match &config.source {
        ConfigSource::Xds(_) if !service.config_loaded() => {
            tracing::info!("serving before the xDS control plane's first configuration")
        }
        ConfigSource::Xds(_) => tracing::info!(
            "configuration from the xDS control plane: {} domain(s)",
            service.config().domains().count()
        ),
        ConfigSource::Dir(dir) if !service.config_loaded() => tracing::warn!(
            "serving before the configuration in {} loads (FORCE_START_WITHOUT_INITIAL_CONFIG)",
            dir.display()
        ),
        ConfigSource::Nothing => tracing::warn!(
            "RUNTIME_SUBDIRECTORY is empty: no configuration file is read and every domain is \
             unknown, as in the reference (set RUNTIME_SUBDIRECTORY, or RUNTIME_WATCH_ROOT=false \
             to read $RUNTIME_ROOT/$RUNTIME_APPDIRECTORY)"
        ),
        ConfigSource::Dir(dir) => tracing::info!(
            "configuration from {}: {} domain(s)",
            dir.display(),
            service.config().domains().count()
        ),
    }
}
