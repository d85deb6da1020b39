//! Run with `cargo run --example llm_budget`, then
//! `curl -i -H 'x-api-key: alice' -d '{"tokens": 120, "stream": false}' http://127.0.0.1:3000/v1/complete`.
//!
//! A token budget for an AI API, whose cost is known only after the answer: each request
//! reserves an estimate of tokens at admission and is admitted only while its client's budget
//! has room for it; the answer's `x-usage-tokens` (a header, or a trailer once a streamed
//! answer ends) settles the real cost, the difference charged or given back in one store
//! call. An answer that never tells (a dropped stream) is charged its estimate. Environment
//! variables:
//!
//! - `PORT`: the port on 127.0.0.1 (default 3000).
//! - `TOKEN_BUDGET`: the tokens each `x-api-key` may spend, a quota such as `1000/min` (the
//!   default) or `500/2s`, counted in a fixed window.
//! - `REDIS_URL`: share the budget through Redis (e.g. `redis://127.0.0.1:6379`) across every
//!   copy of this example; without it each process counts on its own, in memory.
//!
//! `POST /v1/complete` stands in for an upstream model. It takes the JSON body
//! `{"tokens": N, "stream": bool}` (`stream` defaults to false): not streamed, it answers
//! with the header `x-usage-tokens: N`; streamed, it sends 5 chunks over 125 ms, then
//! `x-usage-tokens: N` as a trailer. Any other body gets 400 (which used no tokens:
//! `x-usage-tokens: 0`). The estimate is the request header `x-estimated-tokens`, default
//! 100. A request without `x-api-key` gets 400; one past the budget gets 429, whose
//! `RateLimit` header gives the tokens left and the seconds until the window resets.
//!
//! A bad value exits with status 2 and says what is wrong.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use http_body::Frame;
use tokio::time::Sleep;
use tollgate::key;
use tollgate::rules::{ResponseCost, Rule};
use tollgate::store::{MemoryStore, RedisStore};
use tollgate::{Algorithm, ConfigError, Quota, RateLimitLayer};

/// The header that tells what an answer cost, and the one that tells what a request expects.
const USAGE: &str = "x-usage-tokens";
const ESTIMATE: &str = "x-estimated-tokens";

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
    axum::serve(listener, app).await.expect("server");
}

/// The route, limited by the token budget of each `x-api-key`.
fn app() -> Result<Router, ConfigError> {
    let budget: Quota = std::env::var("TOKEN_BUDGET")
        .unwrap_or_else(|_| "1000/min".to_owned())
        .parse()
        .map_err(|e: ConfigError| e.context("TOKEN_BUDGET"))?;
    let tokens = Rule::new("tokens", budget)
        .algorithm(Algorithm::FixedWindow)
        .path("/v1/complete")
        .cost_from_response(
            ResponseCost::header(USAGE)
                .estimate_header(ESTIMATE)
                .estimate(100),
        );
    let builder = RateLimitLayer::builder()
        .key(key::Header::new("x-api-key"))
        .rule(tokens);
    let builder = match std::env::var("REDIS_URL") {
        Ok(url) => builder.store(RedisStore::from_url(&url).map_err(|e| e.context("REDIS_URL"))?),
        Err(_) => builder.store(MemoryStore::new()),
    };
    Ok(Router::new()
        .route("/v1/complete", post(complete))
        .layer(builder.build()?))
}

/// `POST /v1/complete`: the stand-in for a model, answering with what it "used".
async fn complete(body: Bytes) -> Response {
    let Some((tokens, stream)) = parse(&body) else {
        let why = "Bad Request: expected the JSON body {\"tokens\": N, \"stream\": bool}\n";
        return (StatusCode::BAD_REQUEST, [(USAGE, "0")], why).into_response();
    };
    if !stream {
        let text = format!("{{\"tokens\":{tokens}}}\n");
        return ([(USAGE, tokens.to_string())], text).into_response();
    }
    let chunks = Body::new(Chunks {
        left: 5,
        tokens: Some(tokens),
        wait: Box::pin(tokio::time::sleep(CHUNK_EVERY)),
    });
    // HTTP/1.1 sends only the trailers a response announces (to a client that sent
    // `te: trailers`); HTTP/2 sends them all.
    ([(header::TRAILER, USAGE)], chunks).into_response()
}

/// `{"tokens": N, "stream": bool}`, `stream` optional: N and whether to stream.
fn parse(body: &[u8]) -> Option<(u64, bool)> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let object = value.as_object()?;
    let tokens = object.get("tokens")?.as_u64()?;
    let stream = match object.get("stream") {
        None => false,
        Some(stream) => stream.as_bool()?,
    };
    Some((tokens, stream))
}

/// How long each of the 5 chunks of a streamed answer takes.
const CHUNK_EVERY: Duration = Duration::from_millis(25);

/// A streamed answer: a chunk every [`CHUNK_EVERY`], then the usage as a trailer.
struct Chunks {
    left: u32,
    /// The usage, until its trailer is sent.
    tokens: Option<u64>,
    wait: Pin<Box<Sleep>>,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            let Some(tokens) = self.tokens.take() else {
                return Poll::Ready(None);
            };
            let mut trailers = HeaderMap::new();
            trailers.insert(USAGE, HeaderValue::from(tokens));
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        if self.wait.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.left -= 1;
        let deadline = tokio::time::Instant::now() + CHUNK_EVERY;
        self.wait.as_mut().reset(deadline);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
            b"data: chunk\n\n",
        )))))
    }
}
