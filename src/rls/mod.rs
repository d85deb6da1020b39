//! Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService`) over any
//! tollgate store, configured by the reference implementation's YAML files
//! (envoyproxy/ratelimit): [`RateLimitService`], built from an [`RlsConfig`] or a directory
//! of files. The [guide](crate::guide::envoy) shows how to run it and how it compares with the
//! reference.
//!
//! How a request goes through: `service.rs` takes the configuration in force (`source.rs`
//! reloads it), `plan.rs` finds each descriptor's limit (`matching.rs`, in the tree that
//! `config.rs` compiled from `yaml.rs`'s files), `decide.rs` asks the store for all of them
//! at once, and `response.rs` writes the answer (`json.rs` in JSON, for `POST /json`);
//! `stats.rs` counts it. Limits may instead come from an xDS control plane (`xds.rs`).

mod config;
mod decide;
mod json;
mod matching;
mod metadata;
mod plan;
mod response;
mod service;
mod source;
mod stats;
mod xds;
mod yaml;

pub use config::RlsConfig;
pub use json::JsonAnswer;
pub use response::ResponseHeaders;
pub use service::{RateLimitService, RateLimitServiceBuilder};
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
