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
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // A quota is checked where it is made: `Quota::per_minute(0)` is a `ConfigError`.
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(Quota::per_minute(100)?, key::PeerIp::default()));
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // PeerIp needs the peer address: serve with connect info.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Denied requests get `429 Too Many Requests` with `Retry-After`; every limited response
//! carries `RateLimit-Policy` / `RateLimit` headers (see [`HeaderStyle`]). gRPC requests get a
//! `RESOURCE_EXHAUSTED` status with `grpc-retry-pushback-ms` instead.
//!
//! # Guides
//!
//! - [Algorithms](guide::algorithms): the seven algorithms, their exact semantics, quotas.
//! - [Client keys and proxies](guide::keys): who counts as one client, behind proxies too.
//! - [Rules and the rules file](guide::rules): per-route and stacked limits, cost, tiers,
//!   modes, the TOML file and its hot reload.
//! - [Redis](guide::redis): deployments (standalone, Sentinel, Cluster, TLS), failure modes,
//!   the cache of denials, leases for hot keys.
//! - [Operations](guide::operations): responses and headers, acting on one client, metrics.
//! - [gRPC](guide::grpc): tonic servers and what their clients see.
//! - [Costs known after the response](guide::response_costs): token budgets for AI APIs,
//!   reserved at admission and settled at what the response tells.
//! - Envoy's rate limit service: the `tollgate-rls` crate, a drop-in for envoyproxy/ratelimit
//!   (a binary, and a library for your own tonic server) built on [`engine`].
//! - [Operations](guide::operations#decisions-in-your-own-code-the-door): decisions in your
//!   own code (a handler, a WebSocket, a job) through the layer's door.
//!
//! # How a request goes through
//!
//! [`RateLimitLayer`] (`layer/`) makes a [`RateLimit`] service (`service.rs`) around yours.
//! Its `call` asks the limiter (`limiter/`) which rules (`rules/`) apply, with which keys
//! (`key/`) and costs, and returns a [`ResponseFuture`] (`future.rs`) that waits for the
//! limiter's decision, waits again in delay mode, then calls your service or answers itself.
//! The limiter decides through the [engine] (`engine/`, which `tollgate-rls` and the door use
//! too): it plans asks (a key under a policy, at a cost), and the engine decides them together
//! through one store that the builder stacked, outermost first, with a cache of denials (a
//! client already denied is answered locally), leases (hot keys decided locally from quota
//! leased in the backend) and failure handling (timeout, circuit breaker, fallback) around
//! your backend, [`MemoryStore`] or [`RedisStore`] or a [`Store`] of your own; none of them
//! is a type you build. The usual layer (one rule for every request, on the memory store) takes
//! a shorter way to the same answer (`limiter/express.rs`): the engine decides its one ask in
//! the memory store directly, as those wrappers would only pass it on, and a key that is a
//! header is read before the request is taken apart. The limiter turns the engine's
//! [`Decision`]s into headers, a wait, or a refusal (denied, unavailable, bad request) without
//! knowing the protocol; the service renders a refusal for the request, as a 429, 503 or 400
//! or as a gRPC status (`response/`).
//! [`Control`] reads and acts on the limiter afterwards, and is its door for code outside
//! Tower: [`Control::check`] plans one client's cost under one rule (`limiter/door.rs`),
//! the same engine decides it, and [`Checked`] carries the headers or the refusal the layer
//! would send.
//!
//! [`MemoryStore`]: store::MemoryStore
//! [`RedisStore`]: store::RedisStore
//! [`Store`]: store::Store
//! [`Decision`]: store::Decision
//!
//! # Feature Flags
//!
//! - `redis` (default): [`store::RedisStore`], through deadpool-redis.
//! - `sentinel`, `cluster`: [`RedisStore::sentinel`](store::RedisStore::sentinel) and
//!   [`RedisStore::cluster`](store::RedisStore::cluster), the same store on the master Sentinel
//!   names or on a Redis Cluster.
//! - `tls`: `rediss://` URLs, by rustls with the system's root certificates.
//! - `memcached`: [`store::MemcachedStore`], the algorithms on memcached servers (compare-and-set
//!   through async-memcached's meta commands), listed or named by a DNS SRV record
//!   ([`store::MemcachedSrv`], through hickory-resolver).
//! - `axum` (default): [`key::PeerIp`] (and [`key::ClientIp`]) read the peer address axum
//!   records as `ConnectInfo<SocketAddr>`. Nothing else needs axum: the layer serves any
//!   `Service<http::Request<B>>`, axum's routers included, without it.
//! - `tonic`: [`key::PeerIp`] also reads the peer address tonic's server records
//!   (`TcpConnectInfo`), and `RateLimit` passes tonic's `NamedService` through.
//! - `metrics`: counters, a histogram and a gauge through the `metrics` facade
//!   (`tollgate_requests_total{rule, outcome}` and others; see the
//!   [operations guide](guide::operations#metrics)).
//!
//! Without `axum` and `tonic`, [`key::PeerIp`] reads a bare `SocketAddr` request extension,
//! which your own server or middleware can insert. `cargo build --no-default-features` builds
//! neither axum, tonic nor the Redis client.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod algorithm;
pub mod clock;
mod decision;
pub mod engine;
mod error;
mod future;
pub mod key;
mod layer;
mod lease;
mod limiter;
mod lookup_cache;
mod quiet_log;
mod quota;
pub mod reload;
mod response;
pub mod rules;
mod service;
pub mod store;
mod telemetry;

pub use algorithm::Algorithm;
pub use error::{ConfigError, ConfigErrorKind, ControlError};
pub use future::ResponseFuture;
pub use layer::{Checked, Control, RateLimitLayer, RateLimitLayerBuilder, Skip};
pub use limiter::OnMissingKey;
pub use quota::Quota;
pub use response::{HeaderStyle, ResponseBody};
pub use service::RateLimit;

/// Link targets for the guides in `docs/`, read before each guide's own: the guides link to
/// each other by file name (`rules.md`), which works on GitHub; in rustdoc the first
/// definition of a label wins, so these send the same links to the guide modules.
macro_rules! guide_links {
    () => {
        "[algorithms]: crate::guide::algorithms\n\
         [keys]: crate::guide::keys\n\
         [rules]: crate::guide::rules\n\
         [redis]: crate::guide::redis\n\
         [operations]: crate::guide::operations\n\
         [grpc]: crate::guide::grpc\n\
         [response_costs]: crate::guide::response_costs\n\
         [algorithms-picture]: https://raw.githubusercontent.com/tollgate-rs/tollgate/main/docs/algorithms.svg\n"
    };
}

/// Guides: how tollgate behaves and how to run it, one topic each. Every Rust example in them
/// is compiled and run as a test.
pub mod guide {
    #[doc = guide_links!()]
    #[doc = include_str!("../docs/algorithms.md")]
    pub mod algorithms {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/keys.md")]
    pub mod keys {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/rules.md")]
    pub mod rules {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/redis.md")]
    pub mod redis {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/operations.md")]
    pub mod operations {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/grpc.md")]
    pub mod grpc {}

    #[doc = guide_links!()]
    #[doc = include_str!("../docs/response_costs.md")]
    pub mod response_costs {}
}

/// The README's Rust examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
