//! Run with `cargo run --example governor_server`, then `curl -i http://127.0.0.1:3000/`.
//!
//! The quickstart's server (the same routes, keys and quota) limited by `tower_governor`
//! instead of tollgate, so `scripts/bench.sh` can compare the two under the same load.
//! Environment variables:
//!
//! - `PORT`: the port on 127.0.0.1 (default 3000).
//! - `RATE_LIMIT`: a quota as the quickstart reads it, such as `5/10s` (the default) or
//!   `10/s; burst=20`. governor is GCRA: one request every `period / limit`, bursts of up to
//!   `burst` (the limit unless set), which is what tollgate's default algorithm does.
//! - `HEADERS`: `on` for `tower_governor`'s `x-ratelimit-limit`/`-remaining` headers on every
//!   response (its `use_headers()`), as tollgate sends its headers on every response; `off`
//!   (default, `tower_governor`'s default) for headers on denials only.
//!
//! The key is the `x-api-key` header, else the peer IP, as in the quickstart: `tower_governor`
//! has no combinator for that, so [`ApiKeyOrPeerIp`] is a small `KeyExtractor` of our own.
//! A bad value exits with status 2 and says what is wrong.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::routing::{get, post};
use axum::Router;
use http::Request;
use tollgate::{ConfigError, ConfigErrorKind, Quota};
use tower_governor::governor::{GovernorConfig, GovernorConfigBuilder};
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

#[tokio::main]
async fn main() {
    let app = match app() {
        Ok(app) => app,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = match tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: cannot listen on 127.0.0.1:{port}: {e}");
            std::process::exit(2);
        }
    };
    let addr = listener.local_addr().expect("bound address");
    println!("listening on http://{addr}");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .expect("server");
}

fn routes() -> Router {
    Router::new()
        .route("/", get(|| async { "Hello from tollgate!\n" }))
        .route("/health", get(|| async { "ok\n" }))
        .route("/api/items", get(|| async { "[\"apple\", \"pear\"]\n" }))
        .route("/login", post(|| async { "logged in\n" }))
}

/// A client as the quickstart names it: its API key if it sent one, else its peer IP.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Client {
    ApiKey(String),
    Ip(IpAddr),
}

/// `x-api-key`, else the peer IP from axum's `ConnectInfo`.
#[derive(Debug, Clone, Copy)]
struct ApiKeyOrPeerIp;

impl KeyExtractor for ApiKeyOrPeerIp {
    type Key = Client;

    fn extract<T>(&self, req: &Request<T>) -> Result<Client, GovernorError> {
        let api_key = req
            .headers()
            .get("x-api-key")
            .and_then(|value| value.to_str().ok())
            .filter(|text| !text.trim().is_empty());
        if let Some(api_key) = api_key {
            return Ok(Client::ApiKey(api_key.to_owned()));
        }
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| Client::Ip(addr.ip()))
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

fn app() -> Result<Router, ConfigError> {
    let quota: Quota = env_or("RATE_LIMIT", "5/10s")
        .parse()
        .map_err(|e: ConfigError| e.context("RATE_LIMIT"))?;
    let mut builder = GovernorConfigBuilder::default().key_extractor(ApiKeyOrPeerIp);
    builder
        .period(quota.period() / quota.limit())
        .burst_size(quota.capacity());
    let too_fine = || {
        ConfigError::with_kind(
            ConfigErrorKind::Quota,
            "RATE_LIMIT: governor needs at least 1 ns between requests",
        )
    };
    Ok(match env_or("HEADERS", "off").as_str() {
        "off" => {
            let config = builder.finish().ok_or_else(too_fine)?;
            forget_idle_clients(&config);
            routes().layer(GovernorLayer::new(config))
        }
        "on" => {
            let config = builder.use_headers().finish().ok_or_else(too_fine)?;
            forget_idle_clients(&config);
            routes().layer(GovernorLayer::new(config))
        }
        other => {
            return Err(ConfigError::new(format!(
                "HEADERS: expected `on` or `off`, got `{other}`"
            )))
        }
    })
}

/// Drops clients whose quota is whole again once a minute, as `tower_governor`'s README
/// advises (its map otherwise keeps every client it has seen).
fn forget_idle_clients<M>(config: &GovernorConfig<ApiKeyOrPeerIp, M>)
where
    M: governor::middleware::RateLimitingMiddleware<governor::clock::QuantaInstant>
        + Send
        + Sync
        + 'static,
{
    let limiter = config.limiter().clone();
    tokio::spawn(async move {
        let mut every_minute = tokio::time::interval(Duration::from_secs(60));
        loop {
            every_minute.tick().await;
            limiter.retain_recent();
        }
    });
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}
