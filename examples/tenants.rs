//! Run with `cargo run --example tenants`, then
//! `curl -i -H 'x-api-key: pro-1' http://127.0.0.1:3000/`.
//!
//! Limits per tenant, decided at run time and changed without a deploy. Clients are keyed by
//! the `x-api-key` header; each key's quota is its plan, looked up (and cached) on its first
//! request, where a real service would ask its database:
//!
//! - keys that begin with `pro-` get 20 requests per 10 s, every other key 5 per 10 s;
//! - the lookup takes 20 ms, and concurrent first requests of one key make one lookup;
//! - a key that begins with `down-` makes the lookup fail: it gets the rule's own quota,
//!   5 per 10 s, and the failure is logged once and counted.
//!
//! An admin can give one key another quota, on every instance at once (through the store):
//!
//! ```text
//! curl -X PUT -H "authorization: Bearer $ADMIN_TOKEN" -d 50/10s http://127.0.0.1:3000/admin/quota/pro-1
//! curl -X DELETE -H "authorization: Bearer $ADMIN_TOKEN" http://127.0.0.1:3000/admin/quota/pro-1
//! ```
//!
//! What a client has used counts against its new quota. Routes:
//!
//! - `GET /`: the limited route (`RateLimit-Policy` says the quota the client is under).
//! - `GET /lookups`: how many plan lookups this process made so far, as a plain integer.
//! - `PUT /admin/quota/{key}`: sets the key's quota for every instance (body: a quota such
//!   as `50/10s` or `10/s; burst=20`; a `seconds` query parameter makes it expire); 204, 400
//!   naming what is wrong with a body that is not a quota, 401 without the token.
//!   `GET` answers the quota set (404: none), `DELETE` clears it (204).
//!
//! Environment variables, as in the quickstart:
//!
//! - `PORT`: the port on 127.0.0.1 (default 3000).
//! - `REDIS_URL`: share limits and quotas through Redis (e.g. `redis://127.0.0.1:6379`)
//!   across every copy of this example; without it each process keeps them in memory.
//! - `ADMIN_TOKEN`: turns the admin routes on; they need `authorization: Bearer <ADMIN_TOKEN>`
//!   (compared as SHA-256 digests in constant time).
//! - `RUST_LOG`: what is logged (default `info,redis=off`).
//!
//! A bad value exits with status 2 and says what is wrong.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::Router;
use http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tollgate::rules::{QuotaLookup, Rule};
use tollgate::store::{MemoryStore, RedisStore};
use tollgate::{key, Algorithm, ConfigError, Control, ControlError, Quota, RateLimitLayer};

/// The limited rule's name.
const RULE: &str = "api";

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,redis=off".into()),
        )
        .init();
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
    axum::serve(listener, app).await.expect("server");
}

/// The plans "database": how many times it was asked, and its answer for one key after 20 ms.
#[derive(Clone, Default)]
struct Plans {
    lookups: Arc<AtomicU64>,
}

impl Plans {
    async fn quota_of(&self, key: String) -> Result<Option<Quota>, String> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let plan = match key {
            k if k.starts_with("down-") => return Err("the plans database is down".into()),
            k if k.starts_with("pro-") => "20/10s",
            _ => "5/10s",
        };
        plan.parse()
            .map(Some)
            .map_err(|e: ConfigError| e.to_string())
    }
}

fn app() -> Result<Router, ConfigError> {
    let plans = Plans::default();
    let lookup = {
        let plans = plans.clone();
        QuotaLookup::new(move |_: &Parts, key: &str| {
            let (plans, key) = (plans.clone(), key.to_owned());
            async move { plans.quota_of(key).await }
        })
    };
    // The rule's own quota is what a client gets when its plan cannot be looked up. The log
    // counts exactly: a client gets its whole quota in any 10 s, however its requests arrive.
    let rule = Rule::new(RULE, "5/10s".parse()?)
        .path("/")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::Header::new("x-api-key"))
        .quota_from(lookup);
    let builder = RateLimitLayer::builder().rule(rule);
    let builder = match std::env::var("REDIS_URL") {
        Ok(url) => builder.store(RedisStore::from_url(&url).map_err(|e| e.context("REDIS_URL"))?),
        Err(_) => builder.store(MemoryStore::new()),
    };
    let layer = builder.build()?;
    let lookups = Arc::clone(&plans.lookups);
    let mut app = Router::new()
        .route("/", get(|| async { "Hello, tenant!\n" }))
        .route(
            "/lookups",
            get(move || async move { lookups.load(Ordering::Relaxed).to_string() }),
        );
    if let Some(token) = std::env::var("ADMIN_TOKEN").ok().filter(|t| !t.is_empty()) {
        app = app.merge(admin(layer.control(), &token));
    }
    Ok(app.layer(layer))
}

/// What the admin routes need: the layer's control, and the digest of the token they ask for.
#[derive(Clone)]
struct Admin {
    control: Control,
    token_digest: [u8; 32],
}

fn admin(control: Control, token: &str) -> Router {
    Router::new()
        .route(
            "/admin/quota/{key}",
            put(set_quota).get(get_quota).delete(clear_quota),
        )
        .with_state(Admin {
            control,
            token_digest: Sha256::digest(token.as_bytes()).into(),
        })
}

/// `None` when the request carries the admin token; else the 401 to answer.
fn unauthorized(admin: &Admin, headers: &HeaderMap) -> Option<Response> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let presented: [u8; 32] = Sha256::digest(bearer.as_bytes()).into();
    if bool::from(presented.ct_eq(&admin.token_digest)) {
        return None;
    }
    let answer = (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "Unauthorized: send authorization: Bearer <ADMIN_TOKEN>\n",
    );
    Some(answer.into_response())
}

/// `?seconds=N`: how long a quota set holds.
#[derive(serde::Deserialize)]
struct Expiry {
    seconds: Option<u64>,
}

async fn set_quota(
    State(admin): State<Admin>,
    Path(key): Path<String>,
    Query(expiry): Query<Expiry>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if let Some(refused) = unauthorized(&admin, &headers) {
        return refused;
    }
    let quota: Quota = match body.trim().parse() {
        Ok(quota) => quota,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let expires_after = expiry.seconds.map(Duration::from_secs);
    answer(
        admin
            .control
            .set_quota(RULE, &key, quota, expires_after)
            .await,
    )
}

async fn clear_quota(
    State(admin): State<Admin>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = unauthorized(&admin, &headers) {
        return refused;
    }
    answer(admin.control.clear_quota(RULE, &key).await)
}

async fn get_quota(
    State(admin): State<Admin>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = unauthorized(&admin, &headers) {
        return refused;
    }
    match admin.control.quota_override(RULE, &key).await {
        // Shown as it is written: 50/10s.
        Ok(Some(quota)) => format!("{}\n", quota.to_string().trim_matches('"')).into_response(),
        Ok(None) => (StatusCode::NOT_FOUND, "no quota set for this key\n").into_response(),
        Err(e) => failed(e),
    }
}

/// 204 when done, else the error.
fn answer(done: Result<(), ControlError>) -> Response {
    match done {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => failed(e),
    }
}

fn failed(e: ControlError) -> Response {
    let status = match e {
        ControlError::Quota(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, format!("{e}\n")).into_response()
}
