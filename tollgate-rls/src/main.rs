//! tollgate-rls: a drop-in replacement for Envoy's rate limit service (envoyproxy/ratelimit),
//! serving `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` from the reference's
//! YAML files and environment, decided by `tollgate::rls` (see docs/envoy.md).
//!
//! This crate only wires: the environment (`settings.rs`), the store it names (`store.rs`),
//! the configuration directory, gRPC on `GRPC_HOST:GRPC_PORT`, HTTP on `HOST:PORT` and
//! `DEBUG_HOST:DEBUG_PORT` (`http.rs`), logging and metrics.
//!
//! Once listening it prints one line to stdout:
//! `tollgate-rls listening on grpc=ADDR http=ADDR debug=ADDR store=…`. A bad setting exits
//! with status 2, a configuration file that does not load with status 1, each with a message
//! that names the variable or the file.

mod http;
mod settings;
mod store;

use std::future::{Future, IntoFuture};
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate::rls::{RateLimitService, ResponseHeaders};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic_health::ServingStatus;
use tracing_subscriber::EnvFilter;

use crate::http::Health;
use crate::settings::Settings;

fn main() -> ExitCode {
    let settings = match Settings::from_env() {
        Ok(settings) => settings,
        Err(e) => return fail(2, &e),
    };
    if let Err(e) = init_logging(&settings) {
        return fail(2, &e);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
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
    let (store, described) = match store::from_settings(settings.redis.as_ref()) {
        Ok(store) => store,
        Err(e) => return fail(2, &e),
    };
    let mut builder = RateLimitService::builder()
        .config_dir(&settings.config_dir)
        .merge_domains(settings.merge_domains)
        .ignore_dot_files(settings.ignore_dot_files)
        .store_timeout(settings.store_timeout)
        .on_store_error(settings.on_store_error)
        .charging(settings.charging)
        .shadow_mode(settings.shadow_mode)
        .quota_mode(settings.quota_mode);
    if let Some(redis) = store {
        builder = builder.store(redis);
    }
    if let Some([limit, remaining, reset]) = &settings.headers {
        builder = builder.response_headers(ResponseHeaders::new(limit, remaining, reset));
    }
    let service = match builder.build() {
        Ok(service) => service,
        Err(e) => return fail(1, &e.to_string()),
    };

    // Before the `listening` line: a SIGTERM right after it must find the handler in place.
    let signal = stop_signal();
    let bind = |host: &str, port: u16| {
        let address = format!("{host}:{port}");
        async move {
            let address: SocketAddr = address
                .parse()
                .map_err(|_| format!("{address:?} is not an address to listen on"))?;
            TcpListener::bind(address)
                .await
                .map_err(|e| format!("cannot listen on {address}: {e}"))
        }
    };
    let listeners = async {
        Ok::<_, String>((
            bind(&settings.grpc_host, settings.grpc_port).await?,
            bind(&settings.host, settings.port).await?,
            bind(&settings.debug_host, settings.debug_port).await?,
        ))
    };
    let (grpc, main, debug) = match listeners.await {
        Ok(listeners) => listeners,
        Err(e) => return fail(1, &e),
    };
    let address = |l: &TcpListener| l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    println!(
        "tollgate-rls listening on grpc={} http={} debug={} store={described}",
        address(&grpc),
        address(&main),
        address(&debug),
    );
    let _ = std::io::stdout().flush();
    tracing::info!(
        "configuration from {}: {} domain(s)",
        settings.config_dir.display(),
        service.config().domains().count()
    );

    let health = Arc::new(Health {
        terminating: AtomicBool::new(false),
        needs_config: settings.healthy_with_config,
    });
    let (reporter, health_service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("ratelimit", ServingStatus::Serving)
        .await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let grpc_server = Server::builder()
        .tcp_nodelay(true)
        .add_service(health_service)
        .add_service(service.clone().into_server())
        .serve_with_incoming_shutdown(TcpIncoming::from(grpc), stopped());
    let main_app = http::main_router(service.clone(), Arc::clone(&health), metrics);
    let main_server = axum::serve(main, main_app).with_graceful_shutdown(stopped());
    let debug_server =
        axum::serve(debug, http::debug_router(service)).with_graceful_shutdown(stopped());

    let signals = async move {
        signal.await;
        tracing::warn!("stopping: signal received");
        health.terminating.store(true, Ordering::Relaxed);
        reporter
            .set_service_status("ratelimit", ServingStatus::NotServing)
            .await;
        reporter
            .set_service_status("", ServingStatus::NotServing)
            .await;
        let _ = stop_tx.send(true);
    };
    tokio::spawn(signals);
    let servers = async {
        let (g, m, d) = tokio::join!(
            report("gRPC", grpc_server),
            report("HTTP", main_server.into_future()),
            report("debug HTTP", debug_server.into_future()),
        );
        g && m && d
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
    };
    match ended {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
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
