//! Run with `cargo run --example in_handler`, then
//! `curl -i -d '{"user":"ann"}' http://127.0.0.1:3000/submit`.
//!
//! A limit the layer cannot apply: the client is named inside the JSON body, so the handler
//! asks the layer's door ([`tollgate::Control`]) for one unit of that user's quota, with every
//! guarantee the layer has (the store's failure handling, the cache of denials, leases,
//! metrics) and the same answer: the same `RateLimit` and `RateLimit-Policy` headers, and the
//! same 429 with `Retry-After`. Environment variables, as the quickstart reads them:
//!
//! - `PORT`: the port on 127.0.0.1 (default 3000).
//! - `RATE_LIMIT`: each user's quota, such as `5/10s` (the default), `100/min` or `5/1h`.
//! - `REDIS_URL`: share the limit through Redis (e.g. `redis://127.0.0.1:6379`) across every
//!   copy of this example; without it each process limits on its own, in memory.
//!
//! `POST /submit` takes `{"user": "..."}` and answers 200, or 429 once that user's quota is
//! spent; a body that is not that JSON gets 400 with the reason. A bad variable exits with
//! status 2 and says what is wrong.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde::Deserialize;
use tollgate::store::{MemoryStore, RedisStore};
use tollgate::{ConfigError, Control, Quota, RateLimitLayer};

/// The body `POST /submit` takes.
#[derive(Deserialize)]
struct Submission {
    user: String,
}

#[tokio::main]
async fn main() {
    let control = match door() {
        Ok(control) => control,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let app = Router::new()
        .route("/submit", post(submit))
        .with_state(control);
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

/// The door of a layer that is never put on a route: one rule, `submit`, in the store
/// `REDIS_URL` names (else memory).
fn door() -> Result<Control, ConfigError> {
    let quota: Quota = std::env::var("RATE_LIMIT")
        .unwrap_or_else(|_| "5/10s".into())
        .parse()
        .map_err(|e: ConfigError| e.context("RATE_LIMIT"))?;
    let builder = RateLimitLayer::builder().name("submit").quota(quota);
    let builder = match std::env::var("REDIS_URL") {
        Ok(url) => builder.store(RedisStore::from_url(&url).map_err(|e| e.context("REDIS_URL"))?),
        Err(_) => builder.store(MemoryStore::new()),
    };
    builder.build_control()
}

/// One unit of the named user's quota, or the layer's refusal.
async fn submit(State(control): State<Control>, body: axum::body::Bytes) -> Response {
    let submission: Submission = match serde_json::from_slice(&body) {
        Ok(submission) => submission,
        Err(e) => {
            let reason = format!("Bad Request: expected {{\"user\": \"...\"}}: {e}\n");
            return (StatusCode::BAD_REQUEST, reason).into_response();
        }
    };
    let checked = match control.check("submit", &submission.user, 1).await {
        Ok(checked) => checked,
        // Only an unknown rule, which this example does not ask for.
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    match checked.into_result() {
        Ok(headers) => (headers, format!("accepted for {}\n", submission.user)).into_response(),
        Err(refusal) => refusal.into_response(),
    }
}
