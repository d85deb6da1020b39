//! tollgate-rls: a drop-in replacement for Envoy's rate limit service (envoyproxy/ratelimit),
//! serving `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` from the reference's
//! YAML files and environment, decided by `tollgate::rls` (see docs/envoy.md).
//!
//! This crate only wires: the environment (`settings.rs`), the store it names (`store.rs`),
//! the configuration directory, gRPC on `GRPC_HOST:GRPC_PORT` or `GRPC_UDS`, HTTP on
//! `HOST:PORT` and `DEBUG_HOST:DEBUG_PORT` (`http.rs`; the listeners in `listen.rs`), health
//! (`health.rs`), the runtime's threads (`runtime.rs`), logging and metrics (also on
//! `PROMETHEUS_ADDR` with `USE_PROMETHEUS`, or pushed to statsd: `statsd/`).
//!
//! Once listening it prints one line to stdout:
//! `tollgate-rls listening on grpc=ADDR http=ADDR debug=ADDR store=…`. A bad setting exits
//! with status 2, a configuration file that does not load with status 1, each with a message
//! that names the variable or the file. `tollgate-rls check DIR` validates a configuration
//! directory without serving (`check.rs`).

mod check;
mod health;
mod http;
mod listen;
mod runtime;
mod settings;
mod statsd;
mod store;
mod tls;

use std::future::Future;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tollgate_rls::{RateLimitService, ResponseHeaders};
use tonic::transport::Server;
use tracing_subscriber::EnvFilter;

use crate::health::Health;
use crate::settings::Settings;

fn main() -> ExitCode {
    if let Some(checked) = check::from_args() {
        return checked;
    }
    let settings = match Settings::from_env() {
        Ok(settings) => settings,
        Err(e) => return fail(2, &e),
    };
    if let Err(e) = init_logging(&settings) {
        return fail(2, &e);
    }
    let runtime = match runtime::build(settings.worker_threads) {
        Ok(runtime) => runtime,
        Err(e) => return fail(1, &format!("cannot start the async runtime: {e}")),
    };
    runtime.block_on(run(settings))
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("tollgate-rls: {message}");
    ExitCode::from(code)
}

/// `LOG_LEVEL` (the reference's: trace, debug, info, warn, error; default warn) for this
/// server and tollgate, warnings from everything else; `RUST_LOG` instead when set.
fn init_logging(settings: &Settings) -> Result<(), String> {
    let level = match settings.log_level.to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" | "fatal" | "panic" => "error",
        other => {
            return Err(format!(
                "LOG_LEVEL={other:?}: expected debug, info, warn or error"
            ))
        }
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("warn,tollgate={level},tollgate_rls={level}")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match settings.log_json {
        true => builder.json().try_init(),
        false => builder.try_init(),
    };
    installed.map_err(|e| format!("cannot set up logging: {e}"))
}

async fn run(settings: Settings) -> ExitCode {
    for (name, why) in &settings.ignored {
        tracing::warn!("{name} is ignored: {why}");
    }
    let metrics = match PrometheusBuilder::new().install_recorder() {
        Ok(handle) => handle,
        Err(e) => return fail(1, &format!("cannot set up metrics: {e}")),
    };
    tokio::spawn(upkeep(metrics.clone()));
    // With memcached (`BACKEND_TYPE=memcache`), Redis is not used, as in the reference.
    let redis = settings
        .redis
        .as_ref()
        .filter(|_| settings.memcached.is_none());
    let (store, described) = match store::from_settings(redis) {
        Ok(store) => store,
        Err(e) => return fail(2, &e),
    };
    let mut builder = match &settings.xds {
        Some(xds) => RateLimitService::builder().config_xds(xds.clone()),
        None => RateLimitService::builder().config_dir(&settings.config_dir),
    };
    builder = builder
        .merge_domains(settings.merge_domains)
        .serve_before_config(settings.force_start)
        .ignore_dot_files(settings.ignore_dot_files)
        .store_timeout(settings.store_timeout)
        .charging(settings.charging)
        .shadow_mode(settings.shadow_mode)
        .quota_mode(settings.quota_mode)
        .response_dynamic_metadata(settings.dynamic_metadata)
        .stats_max_series(settings.stats_max_series)
        .near_limit_ratio(settings.near_limit_ratio);
    if let Some(policy) = settings.on_store_error {
        builder = builder.on_store_error(policy);
    }
    if let Some(redis) = store.clone() {
        tokio::spawn(store::publish_pool_size(redis));
    }
    if let Some(push) = settings.statsd.clone() {
        if let Err(e) = statsd::spawn(push, metrics.clone()) {
            return fail(1, &format!("cannot start the statsd push: {e}"));
        }
    }
    let probe = store.clone();
    if let Some(redis) = store {
        builder = builder.store(redis);
    }
    let described = match &settings.memcached {
        None => described,
        Some(memcached) => match store::memcached(memcached, &settings.key_prefix).await {
            Ok((memcached, described)) => {
                builder = builder.store(memcached);
                described
            }
            Err(e) => return fail(2, &e),
        },
    };
    if let Some([limit, remaining, reset]) = &settings.headers {
        builder = builder.response_headers(ResponseHeaders::new(limit, remaining, reset));
    }
    let service = match builder.build() {
        Ok(service) => service,
        Err(e) => return fail(1, &e.to_string()),
    };

    // Before the `listening` line: a SIGTERM right after it must find the handler in place.
    let mut signal = Box::pin(stop_signal());
    if settings.xds.is_some() && !settings.force_start {
        // As the reference's NewService does without FORCE_START_WITHOUT_INITIAL_CONFIG.
        tracing::info!("waiting for the first configuration from the xDS control plane");
        tokio::select! {
            () = service.wait_for_config() => {}
            () = &mut signal => return ExitCode::SUCCESS,
        }
    }
    let grpc_tls = match settings
        .grpc_tls
        .as_ref()
        .map(tls::server_config)
        .transpose()
    {
        Ok(config) => config,
        Err(e) => return fail(1, &e),
    };
    if grpc_tls.is_some() && settings.grpc_uds.is_some() {
        return fail(
            2,
            "GRPC_SERVER_USE_TLS: TLS is served on GRPC_PORT, not on GRPC_UDS",
        );
    }
    let (grpc, main, debug, prometheus) = match listen_all(&settings).await {
        Ok(listeners) => listeners,
        Err(e) => return fail(1, &e),
    };
    let address = |l: &TcpListener| l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    println!(
        "tollgate-rls listening on grpc={} http={} debug={} store={described}",
        grpc.address(),
        address(&main),
        address(&debug),
    );
    let _ = std::io::stdout().flush();
    match &settings.xds {
        Some(_) if !service.config_loaded() => {
            tracing::info!("serving before the xDS control plane's first configuration")
        }
        Some(_) => tracing::info!(
            "configuration from the xDS control plane: {} domain(s)",
            service.config().domains().count()
        ),
        None if !service.config_loaded() => tracing::warn!(
            "serving before the configuration in {} loads (FORCE_START_WITHOUT_INITIAL_CONFIG)",
            settings.config_dir.display()
        ),
        None => tracing::info!(
            "configuration from {}: {} domain(s)",
            settings.config_dir.display(),
            service.config().domains().count()
        ),
    }

    let (reporter, health_service) = tonic_health::server::health_reporter();
    let health = Arc::new(Health::new(settings.healthy_with_config, reporter));
    health.publish(&service).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    // The store answers once before health says SERVING (the memory store at once).
    let startup = {
        let (health, service) = (Arc::clone(&health), service.clone());
        let (timeout, retry) = (settings.store_timeout, settings.store_startup);
        async move {
            if let Some(redis) = &probe {
                health::wait_for_store(redis, timeout, retry).await?;
            }
            health.store_answered(&service).await;
            health.follow(&service).await;
            Ok::<(), String>(())
        }
    };

    let grpc_server = Server::builder()
        .tcp_nodelay(true)
        .max_concurrent_streams(settings.grpc_max_concurrent_streams)
        .max_connection_age(settings.grpc_max_connection_age)
        .max_connection_age_grace(settings.grpc_max_connection_age_grace)
        .add_service(health_service)
        .add_service(service.clone().into_server());
    let grpc_stopped = stopped();
    let grpc_server = async move {
        match (grpc, grpc_tls) {
            (GrpcListener::Tcp(listener), Some(config)) => {
                let incoming = listen::grpc_tls_incoming(listener, config);
                grpc_server
                    .serve_with_incoming_shutdown(incoming, grpc_stopped)
                    .await
            }
            (GrpcListener::Tcp(listener), None) => {
                let incoming = listen::grpc_incoming(listener);
                grpc_server
                    .serve_with_incoming_shutdown(incoming, grpc_stopped)
                    .await
            }
            (GrpcListener::Unix(listener, _), _) => {
                let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
                grpc_server
                    .serve_with_incoming_shutdown(incoming, grpc_stopped)
                    .await
            }
        }
    };
    let prometheus_server = prometheus.map(|(listener, path)| {
        tracing::info!("metrics also on {}{path}", address(&listener));
        let app = http::prometheus_router(metrics.clone(), path);
        listen::serve_http(listener, app, stopped())
    });
    let main_app = http::main_router(service.clone(), Arc::clone(&health), metrics);
    let main_server = listen::serve_http(main, main_app, stopped());
    let debug_server = listen::serve_http(debug, http::debug_router(service), stopped());

    let signals = async move {
        signal.await;
        tracing::warn!("stopping: signal received");
        health.terminate().await;
        let _ = stop_tx.send(true);
    };
    tokio::spawn(signals);
    let servers = async {
        let prometheus = async {
            match prometheus_server {
                Some(server) => report("Prometheus HTTP", server).await,
                None => true,
            }
        };
        let (g, m, d, p) = tokio::join!(
            report("gRPC", grpc_server),
            report("HTTP", main_server),
            report("debug HTTP", debug_server),
            prometheus,
        );
        g && m && d && p
    };
    // Once stopping, requests in flight get a grace period; connections that clients keep
    // open (Envoy keeps its connection) do not hold the exit.
    let grace = async {
        stopped().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let ended = tokio::select! {
        ended = servers => ended,
        () = grace => true,
        Err(e) = startup => return fail(1, &e),
    };
    match ended {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}

/// Where gRPC is served: `GRPC_HOST:GRPC_PORT`, or the Unix socket `GRPC_UDS`.
enum GrpcListener {
    Tcp(TcpListener),
    Unix(UnixListener, String),
}

impl GrpcListener {
    /// The address for the `listening` line: `host:port`, or `unix:PATH`.
    fn address(&self) -> String {
        match self {
            Self::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Self::Unix(_, path) => format!("unix:{path}"),
        }
    }
}

/// The listeners the settings name: gRPC, HTTP, debug, and with `USE_PROMETHEUS` the metrics'
/// own (with its path).
async fn listen_all(
    settings: &Settings,
) -> Result<
    (
        GrpcListener,
        TcpListener,
        TcpListener,
        Option<(TcpListener, String)>,
    ),
    String,
> {
    let grpc = match &settings.grpc_uds {
        Some(path) => GrpcListener::Unix(listen::bind_unix(path)?, path.display().to_string()),
        None => GrpcListener::Tcp(
            listen::bind("GRPC_HOST", &settings.grpc_host, settings.grpc_port).await?,
        ),
    };
    let main = listen::bind("HOST", &settings.host, settings.port).await?;
    let debug = listen::bind("DEBUG_HOST", &settings.debug_host, settings.debug_port).await?;
    let prometheus = match &settings.prometheus {
        None => None,
        Some((address, path)) => {
            let bad = || format!("PROMETHEUS_ADDR={address:?}: expected host:port");
            let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
            let port = port.parse::<u16>().map_err(|_| bad())?;
            let listener = listen::bind("PROMETHEUS_ADDR", host, port).await?;
            Some((listener, path.clone()))
        }
    };
    Ok((grpc, main, debug, prometheus))
}

/// How often the recorder folds the samples its histograms gathered into their summaries.
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

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

/// How long requests in flight may take to finish once a signal asks the server to stop.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs a server to its end; whether it ended without an error.
async fn report<E: std::fmt::Display>(
    name: &str,
    server: impl Future<Output = Result<(), E>>,
) -> bool {
    match server.await {
        Ok(()) => true,
        Err(e) => {
            tracing::error!("the {name} server failed: {e}");
            false
        }
    }
}

/// Resolves on SIGTERM or SIGINT; the handlers are installed when this is called.
fn stop_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let interrupt = tokio::signal::ctrl_c();
    async move {
        #[cfg(unix)]
        if let Some(mut term) = term {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt => {}
            }
            return;
        }
        let _ = interrupt.await;
    }
}
