//! Serving until stopped: gRPC (the service and health), HTTP, debug and, with
//! `USE_PROMETHEUS`, the metrics' own port, each on its listener. The store has answered
//! before (nothing listens until it does); a stop signal turns health NOT_SERVING, stops
//! accepting, and gives requests in flight a grace period.

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate::store::RedisStore;
use tollgate_rls::{RateLimitQuotaService, RateLimitService};
use tonic::transport::server::Router;
use tonic::transport::Server;
use tonic_health::pb::health_server::{Health as HealthService, HealthServer};

use super::error::StartError;
use super::health::Health;
use super::{debug, http};
use tokio_stream::StreamExt as _;

use crate::listen::{self, AuthorityFix, GrpcListener, Listeners};
use crate::settings::{Server as ServerSettings, Settings};

/// How long requests in flight may take to finish once a signal asks the server to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Serves `service` on `listeners` until `signal` (then after a grace period), or until a
/// server fails (status 1).
pub(crate) async fn until_stopped(
    settings: &Settings,
    service: RateLimitService,
    redis: Option<RedisStore>,
    listeners: Listeners,
    metrics: PrometheusHandle,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Result<ExitCode, StartError> {
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let health = Arc::new(Health::new(settings.config.healthy_with_config, reporter));
    health.publish(&service).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = Stopped(stop_rx);
    let store_followed = redis.filter(|_| settings.store.health_follows_redis());
    let timeout = settings.store.timeout;
    tokio::spawn(follow(
        Arc::clone(&health),
        service.clone(),
        store_followed,
        timeout,
    ));

    let quotas = RateLimitQuotaService::new(&service);
    let grpc = grpc_router(&settings.server, health_service, &service, &quotas);
    let grpc = serve_grpc(grpc, listeners.grpc, listeners.grpc_tls, stopped.wait());
    let http = HttpPorts {
        main: listeners.main,
        debug: listeners.debug,
        prometheus: listeners.prometheus,
    };
    let http = http.serve(service, Arc::clone(&health), metrics, &stopped);
    tokio::spawn(async move {
        signal.await;
        tracing::warn!("stopping: signal received");
        health.terminate().await;
        // Every RLQS stream gets zero-TTL assignments first: its Envoy falls back to its
        // `expired_assignment_behavior` rather than keep quota this instance no longer backs.
        quotas.shutdown(SHUTDOWN_GRACE / 2).await;
        let _ = stop_tx.send(true);
    });
    let servers = async {
        let (grpc, http) = tokio::join!(report("gRPC", grpc), http);
        grpc && http
    };
    // Once stopping, requests in flight get a grace period; connections that clients keep
    // open (Envoy keeps its connection) do not hold the exit.
    let grace = async {
        stopped.wait().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let ended = tokio::select! {
        ended = servers => ended,
        () = grace => true,
    };
    match ended {
        true => Ok(ExitCode::SUCCESS),
        false => Ok(ExitCode::FAILURE),
    }
}

/// Resolves, for every server, once the stop was asked for.
struct Stopped(watch::Receiver<bool>);

impl Stopped {
    fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }
}

/// Health follows the configuration (and, with `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`, Redis)
/// until the server stops.
async fn follow(
    health: Arc<Health>,
    service: RateLimitService,
    redis: Option<RedisStore>,
    timeout: Duration,
) {
    match redis {
        Some(redis) => {
            let store = health.follow_store(&service, &redis, timeout);
            tokio::join!(health.follow(&service), store);
        }
        None => health.follow(&service).await,
    }
}

/// The gRPC server: the rate limit service, the rate limit quota service (RLQS) and health,
/// with the connections' limits.
fn grpc_router<H: HealthService>(
    server: &ServerSettings,
    health: HealthServer<H>,
    service: &RateLimitService,
    quotas: &RateLimitQuotaService,
) -> Router {
    Server::builder()
        .tcp_nodelay(true)
        .max_concurrent_streams(server.grpc_max_concurrent_streams)
        .max_connection_age(server.grpc_max_connection_age)
        .max_connection_age_grace(server.grpc_max_connection_age_grace)
        .add_service(health)
        .add_service(service.clone().into_server())
        .add_service(quotas.clone().into_server())
}

/// Serves `grpc` on its listener: TCP or a Unix socket, each with or without TLS.
async fn serve_grpc(
    grpc: Router,
    listener: GrpcListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    stopped: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    match (listener, tls) {
        (GrpcListener::Tcp(listener), Some(config)) => {
            let incoming = listen::grpc_tls_incoming(listener, config);
            grpc.serve_with_incoming_shutdown(incoming, stopped).await
        }
        (GrpcListener::Tcp(listener), None) => {
            let incoming = listen::grpc_incoming(listener);
            grpc.serve_with_incoming_shutdown(incoming, stopped).await
        }
        // C-core clients send the socket's path as `:authority` (listen/authority.rs).
        (GrpcListener::Unix(listener, _), Some(config)) => {
            let incoming = listen::grpc_tls_incoming(listener, config)
                .map(|accepted| accepted.map(AuthorityFix::new));
            grpc.serve_with_incoming_shutdown(incoming, stopped).await
        }
        (GrpcListener::Unix(listener, _), None) => {
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener)
                .map(|accepted| accepted.map(AuthorityFix::new));
            grpc.serve_with_incoming_shutdown(incoming, stopped).await
        }
    }
}

/// The HTTP listeners.
struct HttpPorts {
    main: TcpListener,
    debug: TcpListener,
    prometheus: Option<(TcpListener, String)>,
}

impl HttpPorts {
    /// Serves health, JSON and metrics on `HOST:PORT`, the configuration on the debug port,
    /// and the metrics on `PROMETHEUS_ADDR`, until `stopped`; whether every one ended without
    /// an error.
    fn serve(
        self,
        service: RateLimitService,
        health: Arc<Health>,
        metrics: PrometheusHandle,
        stopped: &Stopped,
    ) -> impl Future<Output = bool> {
        let prometheus = self.prometheus.map(|(listener, path)| {
            tracing::info!("metrics also on {}{path}", listen::address(&listener));
            let app = http::prometheus_router(metrics.clone(), path);
            listen::serve_http(listener, app, stopped.wait())
        });
        let main_app = http::main_router(service.clone(), health, metrics.clone());
        let main = listen::serve_http(self.main, main_app, stopped.wait());
        let debug_app = debug::router(service, metrics);
        let debug = listen::serve_http(self.debug, debug_app, stopped.wait());
        async {
            let prometheus = async {
                match prometheus {
                    Some(server) => report("Prometheus HTTP", server).await,
                    None => true,
                }
            };
            let (main, debug, prometheus) = tokio::join!(
                report("HTTP", main),
                report("debug HTTP", debug),
                prometheus,
            );
            main && debug && prometheus
        }
    }
}

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
