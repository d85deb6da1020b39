//! Rate limiting for Tower services (axum, tonic, hyper), in memory or shared through Redis.
//!
//! [`RateLimitLayer`] wraps any `Service<http::Request<B>>`. A [key] names the client, a
//! [`Quota`] and an [`Algorithm`] say how much it may send, and a [store] decides:
//! [`MemoryStore`](store::MemoryStore) in this process (the default), or
//! [`RedisStore`](store::RedisStore), where every decision is one atomic Lua script so many app
//! instances share one limit.
//!
//! # Quick start
//!
//! ```
//! use std::net::SocketAddr;
//! use axum::{routing::get, Router};
//! use tollgate::{key, Quota, RateLimitLayer};
//!
//! # async fn run() -> std::io::Result<()> {
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(Quota::per_minute(100), key::PeerIp::default()));
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // PeerIp needs the peer address: serve with connect info.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
//! # }
//! ```
//!
//! Denied requests get `429 Too Many Requests` with `Retry-After`; every limited response
//! carries `RateLimit-Policy` / `RateLimit` headers (see [`HeaderStyle`]). gRPC requests get a
//! `RESOURCE_EXHAUSTED` status with `grpc-retry-pushback-ms` instead.
//!
//! # How a request goes through
//!
//! [`RateLimitLayer`] (`layer.rs`) makes a [`RateLimit`] service (`service.rs`) around yours.
//! Its `call` asks the limiter (`limiter.rs`) which rules apply, with which keys and costs, and
//! returns a [`ResponseFuture`] (`future.rs`) that waits for the limiter's decision, waits
//! again in delay mode, then calls your service or answers itself. The limiter asks one
//! [`Store`]: the layer's builder stacks, outermost first, the [`DenialCache`] (a client
//! already denied is answered locally), [`Leases`] (hot keys decided locally from quota
//! leased in the backend), [`Resilient`] (timeout, circuit breaker, fallback) and your
//! backend, [`MemoryStore`] or [`RedisStore`]. The limiter turns the store's [`Decision`]s
//! into headers or a denial (`response.rs`).
//!
//! [`DenialCache`]: store::DenialCache
//! [`Leases`]: store::Leases
//! [`Resilient`]: store::Resilient
//! [`MemoryStore`]: store::MemoryStore
//! [`RedisStore`]: store::RedisStore
//!
//! # Feature Flags
//!
//! - `redis` (default): [`store::RedisStore`], through deadpool-redis.
//! - `axum` (default): [`key::PeerIp`] (and [`key::ClientIp`]) read the peer address axum
//!   records as `ConnectInfo<SocketAddr>`. Nothing else needs axum: the layer serves any
//!   `Service<http::Request<B>>`, axum's routers included, without it.
//! - `tonic`: [`key::PeerIp`] also reads the peer address tonic's server records
//!   (`TcpConnectInfo`), and `RateLimit` passes tonic's `NamedService` through.
//! - `metrics`: counters, a histogram and a gauge through the `metrics` facade
//!   (`tollgate_requests_total{rule, outcome}` and others; see the README's Metrics section).
//!
//! Without `axum` and `tonic`, [`key::PeerIp`] reads a bare `SocketAddr` request extension,
//! which your own server or middleware can insert. `cargo build --no-default-features` builds
//! neither axum, tonic nor the Redis client.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod algorithm;
mod body;
mod clock;
mod count;
mod decision;
mod error;
mod future;
pub mod key;
mod layer;
mod lease;
mod limiter;
mod quiet_log;
mod quota;
mod response;
#[cfg(feature = "rls")]
#[cfg_attr(docsrs, doc(cfg(feature = "rls")))]
pub mod rls;
pub mod rules;
mod service;
pub mod store;
mod telemetry;

pub use algorithm::Algorithm;
pub use body::ResponseBody;
pub use clock::{Clock, ManualClock, SystemClock};
pub use decision::Decision;
pub use error::{ConfigError, ConfigErrorKind, ControlError, StoreError};
pub use future::ResponseFuture;
pub use layer::{RateLimitLayer, RateLimitLayerBuilder};
pub use lease::Lease;
pub use limiter::OnMissingKey;
pub use quota::{Policy, Quota};
pub use response::HeaderStyle;
pub use service::RateLimit;
pub use store::{OnStoreError, Store};

/// The README's Rust examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
