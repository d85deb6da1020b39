//! Run with `cargo run --example grpc`, then call `grpc.health.v1.Health/Check`
//! on 127.0.0.1:50051 more than 5 times within 10 s (see docs/grpc.md).
//!
//! A tonic server with the standard gRPC health service, limited per client: the `x-api-key`
//! metadata names the client, else the peer IP. Denied calls fail with RESOURCE_EXHAUSTED and
//! a `grpc-retry-pushback-ms` saying when to retry. Environment variables:
//!
//! - `PORT`: the port on 127.0.0.1 (default 50051).
//! - `RATE_LIMIT`: a quota such as `5/10s` (the default), `100/min` or `10/s; burst=20`; or
//!   `off` for no limiting at all.
//! - `REDIS_URL`: share the limit through Redis (e.g. `redis://127.0.0.1:6379`) across every
//!   copy of this example; without it each process limits on its own, in memory.
//!
//! A bad value exits with status 2 and says what is wrong.

use tollgate::key;
use tollgate::store::RedisStore;
use tollgate::{ConfigError, Quota, RateLimitLayer};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let limit = match limit() {
        Ok(limit) => limit,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let port = env_or("PORT", "50051");
    let listener = match tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: cannot listen on 127.0.0.1:{port}: {e}");
            std::process::exit(2);
        }
    };
    let addr = listener.local_addr().expect("bound address");
    let incoming = TcpIncoming::from(listener);
    // The standard grpc.health.v1.Health service: the empty service name reports SERVING.
    let (_reporter, health) = tonic_health::server::health_reporter();
    println!("listening on http://{addr}");
    // tonic records the peer address (`TcpConnectInfo`) before any layer runs, so
    // `key::PeerIp` finds it with tollgate's `tonic` feature; no interceptor needed.
    let served = match limit {
        Limit::Off => {
            Server::builder()
                .add_service(health)
                .serve_with_incoming(incoming)
                .await
        }
        Limit::On(layer) => {
            Server::builder()
                .layer(layer)
                .add_service(health)
                .serve_with_incoming(incoming)
                .await
        }
    };
    served.expect("server");
}

/// The layer to put in front of the server, if any (on either store: one layer type).
enum Limit {
    Off,
    On(RateLimitLayer),
}

fn limit() -> Result<Limit, ConfigError> {
    let rate_limit = env_or("RATE_LIMIT", "5/10s");
    if rate_limit == "off" {
        return Ok(Limit::Off);
    }
    let quota: Quota = rate_limit
        .parse()
        .map_err(|e: ConfigError| e.context("RATE_LIMIT"))?;
    let client = key::Header::new("x-api-key").or(key::PeerIp::default());
    let builder = RateLimitLayer::builder()
        .name("grpc")
        .quota(quota)
        .key(client);
    let builder = match std::env::var("REDIS_URL") {
        Ok(url) => builder.store(RedisStore::from_url(&url).map_err(|e| e.context("REDIS_URL"))?),
        Err(_) => builder,
    };
    Ok(Limit::On(builder.build()?))
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}
