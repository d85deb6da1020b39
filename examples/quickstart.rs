//! Run with `cargo run --example quickstart`, then `curl -i http://127.0.0.1:3000/`.
//!
//! An axum server limited per client: the `x-api-key` header names the client, else the peer
//! IP. Environment variables:
//!
//! - `PORT`: the port on 127.0.0.1 (default 3000).
//! - `RATE_LIMIT`: a quota such as `5/10s` (the default), `100/min` or `10/s; burst=20`; or
//!   `off` for no rate limit (and no layer at all without `IN_FLIGHT`: to measure the layer's
//!   overhead).
//! - `IN_FLIGHT`: at most this many requests of one client (its `x-api-key`, else its IP) in
//!   flight at once, on every route, stacked with the rate (off by default). A request that
//!   finds every slot taken gets 429 with `Retry-After: 1`.
//! - `IN_FLIGHT_TTL`: how long the slots of an instance that crashed stay taken in a shared
//!   store (default `30s`; written like `2s`, `500ms` or `1m`); a living instance renews its
//!   slots every third of it.
//! - `ALGORITHM`: `gcra` (default), `token_bucket`, `leaky_bucket`, `fixed_window`,
//!   `fixed_window_from_first`, `sliding_window_log` or `sliding_window`.
//! - `REDIS_URL`: share the limit through Redis (e.g. `redis://127.0.0.1:6379`) across every
//!   copy of this example; without it each process limits on its own, in memory. TLS and
//!   credentials work: `rediss://:password@host:6380`, `redis://user:password@host:6379`
//!   (`rediss://…/#insecure` accepts a certificate nobody vouches for, for tests only).
//! - `REDIS_CLUSTER_NODES`: share the limit through a Redis Cluster instead, given some of its
//!   nodes: `redis://h1:p1,redis://h2:p2,…` (`rediss://` and credentials work here too).
//! - `REDIS_SENTINEL`: share the limit through the master that Redis Sentinel names, given
//!   sentinels `redis://h1:26379,redis://h2:26379,…` and the master's name in
//!   `REDIS_SENTINEL_MASTER` (default `mymaster`).
//! - `MEMCACHE_URL`: share the limit through memcached instead: `memcache://host:port`, several
//!   servers as `memcache://h1:p1,h2:p2`.
//!   Only one of `REDIS_URL`, `REDIS_CLUSTER_NODES`, `REDIS_SENTINEL` and `MEMCACHE_URL` may be
//!   set.
//! - `ON_STORE_ERROR`: `allow` (default), `deny` or `fallback`: what to do while Redis is down.
//! - `STORE_TIMEOUT_MS`: how long a decision waits for the shared store before
//!   `ON_STORE_ERROR` answers (default 50); more for a store far away or a busy machine.
//! - `HEADERS`: which rate-limit headers responses carry: `ietf` (default: `RateLimit` and
//!   `RateLimit-Policy`), `legacy` (`X-RateLimit-*`), `both` or `none`.
//! - `RULES_FILE`: load per-route rules from this TOML file instead of `RATE_LIMIT` (try
//!   `RULES_FILE=examples/rules.toml`), and apply changes to it while running.
//!
//! - `ADMIN_TOKEN`: turns on `DELETE /admin/limits/{rule}/{key}`, which resets one client
//!   under one rule (its state and any block), e.g.
//!   `curl -X DELETE -H "authorization: Bearer $ADMIN_TOKEN" http://127.0.0.1:3000/admin/limits/quickstart/127.0.0.1`.
//!   It needs `authorization: Bearer <ADMIN_TOKEN>` (else 401), answers 204 when done and 404
//!   for a rule that does not exist. It is rate limited like every route, and by a rule of
//!   its own, `admin`: 10 requests a minute per client IP whatever the `x-api-key` (then
//!   429), so a run of wrong tokens is cut short. The token is compared as a SHA-256 digest in
//!   constant time, so the time taken says nothing of its length or content. Without
//!   `ADMIN_TOKEN`, or with `RATE_LIMIT=off`, the route does not exist.
//! - `RUST_LOG`: what is logged (default `info,redis=off`). tollgate logs each change of the
//!   store's state once (the first failure, the circuit opening, the store answering again).
//!   The Redis client's own log (target `redis`) repeats at every attempt to reach a node
//!   that is down, hundreds of lines in a Cluster failover, so it is off by default: see it
//!   with `RUST_LOG=info,redis=warn`.
//!
//! Every answer goes through the limiter, unknown paths (404) and the admin route included.
//! `GET /metrics` answers the limiter's metrics (`tollgate_requests_total` and the others) as
//! Prometheus text; it is never rate limited.
//!
//! `GET /slow?ms=N` sleeps N milliseconds (at most 600000) and answers
//! `{"start_us":S,"end_us":E}`: microseconds since the Unix epoch by the server's clock, when
//! the handler started and ended (for watching `IN_FLIGHT` at work).
//!
//! `POST /signin` answers 200 when the form body is `password=open-sesame`, else 401. Only
//! failed sign-ins count (the `signin` rule's `count_status = [401]`: 3 per minute per client);
//! after three, even the right password gets 429 until the quota refills:
//! `curl -i -d password=guess http://127.0.0.1:3000/signin`.
//!
//! A bad value exits with status 2 and says what is wrong.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tollgate::key;
use tollgate::rules::Rule;
use tollgate::store::{MemcachedStore, MemoryStore, RedisStore};
use tollgate::{
    store::OnStoreError, Algorithm, ConfigError, ConfigErrorKind, Control, ControlError,
    HeaderStyle, Quota, RateLimitLayer, RateLimitLayerBuilder, Skip,
};

/// What is logged unless `RUST_LOG` says otherwise: tollgate's state changes, not the Redis
/// client's warning at every reconnection attempt (see the module docs).
const DEFAULT_LOG: &str = "info,redis=off";

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| DEFAULT_LOG.into()),
        )
        .init();
    let metrics = match PrometheusBuilder::new().install_recorder() {
        Ok(metrics) => metrics,
        Err(e) => {
            eprintln!("error: cannot record metrics: {e}");
            std::process::exit(2);
        }
    };
    // Histograms are summarised as they are rendered; upkeep keeps their memory bounded
    // between scrapes.
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    let app = match app(metrics) {
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

fn routes(metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(move || async move { metrics.render() }))
        .route("/", get(|| async { "Hello from tollgate!\n" }))
        .route("/health", get(|| async { "ok\n" }))
        .route("/api/items", get(|| async { "[\"apple\", \"pear\"]\n" }))
        .route("/login", post(|| async { "logged in\n" }))
        .route("/signin", post(signin))
        .route("/slow", get(slow))
}

/// `GET /slow?ms=N`: sleeps N ms, and says when it started and ended (µs since the epoch).
async fn slow(RawQuery(query): RawQuery) -> Response {
    let ms = (query.unwrap_or_default().split('&'))
        .find_map(|pair| pair.strip_prefix("ms="))
        .map_or(Ok(0), str::parse::<u64>);
    let Some(ms) = ms.ok().filter(|&ms| ms <= 600_000) else {
        let why = "Bad Request: ms must be a whole number of milliseconds, at most 600000\n";
        return (StatusCode::BAD_REQUEST, why).into_response();
    };
    let start_us = epoch_us();
    tokio::time::sleep(Duration::from_millis(ms)).await;
    let end_us = epoch_us();
    let body = format!("{{\"start_us\":{start_us},\"end_us\":{end_us}}}");
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Microseconds since the Unix epoch, by this server's clock.
fn epoch_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// The demo of `count_status`: 200 for the right password, 401 (counted) for any other.
async fn signin(form: String) -> (StatusCode, &'static str) {
    if form == "password=open-sesame" {
        (StatusCode::OK, "signed in\n")
    } else {
        (StatusCode::UNAUTHORIZED, "wrong password\n")
    }
}

/// Failed sign-ins: 3 per minute per client; successful ones are not counted. A rules file
/// has its own (see examples/rules.toml).
fn signin_rule() -> Result<Rule, ConfigError> {
    Ok(Rule::new("signin", Quota::per_minute(3)?)
        .methods([Method::POST])
        .path("/signin")
        .count_status([401]))
}

fn app(metrics: PrometheusHandle) -> Result<Router, ConfigError> {
    let rules_file = std::env::var("RULES_FILE").ok();
    let rate_limit = env_or("RATE_LIMIT", "5/10s");
    let in_flight = in_flight_rule()?;
    if rate_limit == "off" && rules_file.is_none() && in_flight.is_none() {
        return Ok(routes(metrics));
    }
    let algorithm: Algorithm = env_or("ALGORITHM", "gcra")
        .parse()
        .map_err(|e: ConfigError| e.context("ALGORITHM"))?;
    let on_store_error: OnStoreError = env_or("ON_STORE_ERROR", "allow")
        .parse()
        .map_err(|e: ConfigError| e.context("ON_STORE_ERROR"))?;
    let store_timeout = env_or("STORE_TIMEOUT_MS", "50")
        .parse()
        .ok()
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
        .ok_or_else(|| ConfigError::new("STORE_TIMEOUT_MS: expected milliseconds, above 0"))?;
    let headers: HeaderStyle = env_or("HEADERS", "ietf")
        .parse()
        .map_err(|e: ConfigError| e.context("HEADERS"))?;
    let client = key::Header::new("x-api-key").or(key::PeerIp::default());
    let builder = RateLimitLayer::builder()
        .algorithm(algorithm)
        .key(client)
        .skip(Skip::new().path("/metrics"))
        .on_store_error(on_store_error)
        .store_timeout(store_timeout)
        .headers(headers);
    let builder = match in_flight {
        Some(rule) => builder.rule(rule),
        None => builder,
    };
    let builder = match rules_file {
        // The file's rules (watched for changes) replace RATE_LIMIT.
        Some(path) => builder.rules_file(path),
        None if rate_limit == "off" => builder,
        None => {
            let quota: Quota = rate_limit
                .parse()
                .map_err(|e: ConfigError| e.context("RATE_LIMIT"))?;
            builder.name("quickstart").quota(quota).rule(signin_rule()?)
        }
    };
    let admin_token = std::env::var("ADMIN_TOKEN")
        .ok()
        .filter(|token| !token.is_empty());
    let builder = match admin_token {
        Some(_) => builder.rule(admin_rule()?),
        None => builder,
    };
    let layer = with_store(builder)?.build()?;
    let app = match admin_token {
        Some(token) => routes(metrics).merge(admin(layer.control(), &token)),
        None => routes(metrics),
    };
    // The layer goes on last, over every route and the fallback: every answer is limited,
    // 404s and the admin route included.
    Ok(app.layer(layer))
}

/// `IN_FLIGHT` requests of one client at once on every route, their slots living
/// `IN_FLIGHT_TTL` in a shared store unless renewed; none without `IN_FLIGHT`.
fn in_flight_rule() -> Result<Option<Rule>, ConfigError> {
    let Ok(max) = std::env::var("IN_FLIGHT") else {
        return Ok(None);
    };
    let max: u32 = (max.parse().ok().filter(|&n| n > 0)).ok_or_else(|| {
        ConfigError::new("IN_FLIGHT: expected a whole number of requests, above 0")
    })?;
    let ttl = match std::env::var("IN_FLIGHT_TTL") {
        Ok(ttl) => duration(&ttl).ok_or_else(|| {
            ConfigError::new("IN_FLIGHT_TTL: expected a duration such as 30s, 500ms or 1m")
        })?,
        Err(_) => Duration::from_secs(30),
    };
    Ok(Some(Rule::in_flight("in_flight", max).in_flight_ttl(ttl)))
}

/// A duration written as a whole number and a unit: `500ms`, `2s`, `1m`.
fn duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" | "min" => Some(Duration::from_secs(n.checked_mul(60)?)),
        _ => None,
    }
}

/// The admin route: 10 requests a minute per client IP, whatever API key each one sends, on
/// top of the quota every route has. A run of wrong tokens stops at the tenth.
fn admin_rule() -> Result<Rule, ConfigError> {
    Ok(Rule::new("admin", Quota::per_minute(10)?)
        .path("/admin/*")
        .key(key::PeerIp::default()))
}

/// What the admin route needs: the layer's control to act through and the SHA-256 digest of
/// the token it asks for (not the token: its length is not kept either).
#[derive(Clone)]
struct Admin {
    control: Control,
    token_digest: [u8; 32],
}

/// `DELETE /admin/limits/{rule}/{key}`: resets one client under one rule.
fn admin(control: Control, token: &str) -> Router {
    Router::new()
        .route("/admin/limits/{rule}/{key}", delete(reset_client))
        .with_state(Admin {
            control,
            token_digest: Sha256::digest(token.as_bytes()).into(),
        })
}

/// Whether `presented` is the token whose digest is `expected`: the digests, both 32 bytes,
/// are compared in constant time, so how long it takes says nothing of the token's length
/// or of how much of it was guessed right.
fn token_matches(presented: &str, expected: &[u8; 32]) -> bool {
    let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    presented.ct_eq(expected).into()
}

async fn reset_client(
    State(admin): State<Admin>,
    Path((rule, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !token_matches(bearer, &admin.token_digest) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "Unauthorized: send authorization: Bearer <ADMIN_TOKEN>\n",
        )
            .into_response();
    }
    match admin.control.reset(&rule, &key).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e @ ControlError::UnknownRule { .. }) => {
            (StatusCode::NOT_FOUND, format!("{e}\n")).into_response()
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// The variables that choose a shared store; at most one may be set.
const STORE_VARIABLES: [&str; 4] = [
    "REDIS_URL",
    "REDIS_CLUSTER_NODES",
    "REDIS_SENTINEL",
    "MEMCACHE_URL",
];

/// `builder` with Redis when `REDIS_URL` is set, a Redis Cluster when `REDIS_CLUSTER_NODES`
/// is, Sentinel's master when `REDIS_SENTINEL` is, memcached when `MEMCACHE_URL` is, else
/// memory: chosen at run time, the layer's
/// type the same either way.
fn with_store(builder: RateLimitLayerBuilder) -> Result<RateLimitLayerBuilder, ConfigError> {
    let set: Vec<&str> = STORE_VARIABLES
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some())
        .collect();
    if set.len() > 1 {
        return Err(ConfigError::with_kind(
            ConfigErrorKind::Store,
            format!("{} are set: set only one of them", set.join(" and ")),
        ));
    }
    let value = |name: &str| std::env::var(name).unwrap_or_default();
    let list = |value: &str| -> Vec<String> {
        value
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect()
    };
    Ok(match set.first().copied() {
        Some("REDIS_URL") => builder
            .store(RedisStore::from_url(&value("REDIS_URL")).map_err(|e| e.context("REDIS_URL"))?),
        Some("REDIS_CLUSTER_NODES") => builder.store(
            RedisStore::cluster(&list(&value("REDIS_CLUSTER_NODES")))
                .map_err(|e| e.context("REDIS_CLUSTER_NODES"))?,
        ),
        Some("MEMCACHE_URL") => builder.store(
            MemcachedStore::from_url(&value("MEMCACHE_URL"))
                .map_err(|e| e.context("MEMCACHE_URL"))?,
        ),
        Some(_) => builder.store(
            RedisStore::sentinel(
                &list(&value("REDIS_SENTINEL")),
                &env_or("REDIS_SENTINEL_MASTER", "mymaster"),
            )
            .map_err(|e| e.context("REDIS_SENTINEL"))?,
        ),
        None => builder.store(MemoryStore::new()),
    })
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}
