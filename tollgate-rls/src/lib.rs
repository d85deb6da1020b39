//! Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService`) over any
//! tollgate store, configured by the reference implementation's YAML files
//! (envoyproxy/ratelimit): [`RateLimitService`], built from an [`RlsConfig`] or a directory
//! of files, for your own tonic server; the `tollgate-rls` binary of this crate serves it as a
//! drop-in for the reference. The [`guide`] shows how to run it and how it
//! compares with the reference.
//!
//! It is a front end of tollgate's [engine](tollgate::engine): it plans (which limit each
//! descriptor meets, under which key, at what cost) and renders (Envoy's answer, statistics);
//! the engine decides, through the same store wrappers as the Tower layer.
//!
//! How a request goes through: `service.rs` takes the configuration in force (`source.rs`
//! reloads it from the directory that `dir.rs` reads), `limits.rs` refuses a request that
//! asks too much, `plan.rs` finds each descriptor's limit (`matching.rs`, in the tree that
//! `config.rs` compiled from `yaml.rs`'s files), the engine decides all of them
//! at once, and `response.rs` writes the answer (`json.rs` in JSON, for `/json`;
//! `metadata.rs` the dynamic metadata); `stats.rs` counts it (`stat_name.rs` names its
//! series, `series.rs` bounds those that request values make). Limits may instead come from
//! an xDS control plane (`xds.rs`). `dir_check.rs` is `tollgate-rls check DIR`'s reading.
//! Envoy's Rate Limit Quota Service, [`RateLimitQuotaService`], answers from the same
//! configuration and store (`rlqs/`).
//!
//! The binary's own files share this folder: `main.rs` and its folders (`settings/` reads the
//! reference's environment, `store/` builds the store, `listen/` and `serve/` open the ports
//! and serve them, `statsd/` pushes statistics, `config_check/` runs `check`). They use this
//! library as any other program would.
//!
//! # Limits
//!
//! A request's fields come from clients, so each is bounded, far above what Envoy sends (one
//! descriptor per `rate_limits` entry of a route, one entry per action): at most
//! [`MAX_REQUEST_BYTES`] bytes in all, [`MAX_DESCRIPTORS`] descriptors, [`MAX_ENTRIES`]
//! entries in each, and [`MAX_DOMAIN_BYTES`], [`MAX_KEY_BYTES`] and [`MAX_VALUE_BYTES`] bytes
//! in the domain, an entry's key and its value. A request past one is refused at once, before
//! anything is matched or counted, with `INVALID_ARGUMENT` (400 from
//! [`RateLimitService::decide_json`]) and a message that names the bound, what was sent and
//! the limit, e.g. `descriptors per request: 65, over the limit of 64`; a gRPC message past
//! [`MAX_REQUEST_BYTES`] is refused by tonic from its length, unread (`OUT_OF_RANGE`). So the
//! worst request accepted is cheap, and on Redis it is one script call of at most
//! [`MAX_DESCRIPTORS`] checks.

mod cache_key;
mod config;
mod counters;
mod counting;
mod dir;
mod dir_check;
mod json;
mod limits;
mod matching;
mod metadata;
mod plan;
mod request_span;
mod response;
mod rlqs;
mod series;
mod service;
mod service_builder;
mod source;
mod stat_name;
mod stats;
mod swap_check;
mod xds;
mod yaml;

pub use config::{DuplicateDomains, RlsConfig};
pub use dir_check::{DirCheck, DotFiles};
pub use json::JsonAnswer;
pub use limits::{
    MAX_DESCRIPTORS, MAX_DOMAIN_BYTES, MAX_ENTRIES, MAX_KEY_BYTES, MAX_REQUEST_BYTES,
    MAX_VALUE_BYTES,
};
pub use response::ResponseHeaders;
pub use rlqs::{
    RateLimitQuotaService, DEFAULT_ABANDON_AFTER, MAX_BUCKETS_PER_STREAM, MAX_BUCKET_KEYS,
    MAX_STREAMS, REPORT_PERIOD,
};
pub use service::RateLimitService;
pub use service_builder::RateLimitServiceBuilder;
pub use xds::{XdsBackoff, XdsSource, XdsTls};

/// Envoy's messages, as the service takes and gives them (from the `envoy-types` crate).
pub mod proto {
    pub use envoy_types::pb::envoy::config::core::v3::HeaderValue;
    pub use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor, RateLimitDescriptor,
    };
    pub use envoy_types::pb::envoy::service::ratelimit::v3::{
        rate_limit_response, rate_limit_service_client, rate_limit_service_server,
        RateLimitRequest, RateLimitResponse,
    };
    pub use envoy_types::pb::google::protobuf::{Duration, UInt64Value};
}

#[cfg(test)]
mod tests;

/// The guide: running `tollgate-rls` in place of the reference, and this library in your own
/// server. Every Rust example in it is compiled and run as a test.
#[doc = include_str!("../../docs/envoy.md")]
pub mod guide {}
