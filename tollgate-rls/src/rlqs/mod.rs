//! Envoy's Rate Limit Quota Service (RLQS): [`RateLimitQuotaService`] answers each Envoy's
//! usage reports with assignments, from the configuration and store of a
//! [`RateLimitService`](crate::RateLimitService).
//!
//! A stream's state is `stream.rs` (each report checked whole, then answered bucket by
//! bucket); `bucket.rs` maps a bucket to a descriptor, `target.rs` finds its limit as
//! `ShouldRateLimit` would, `grant.rs` takes its quota from the store and shapes Envoy's token
//! bucket, `share.rs` divides what a window has left by demand; `bounds.rs` bounds what a client may make the server hold; `stats.rs` counts.

mod bounds;
mod bucket;
mod grant;
mod service;
mod share;
mod stats;
mod stream;
mod target;

pub use bounds::{MAX_BUCKETS_PER_STREAM, MAX_BUCKET_KEYS, MAX_STREAMS};
pub use grant::REPORT_PERIOD;
pub use service::{RateLimitQuotaService, DEFAULT_ABANDON_AFTER};
