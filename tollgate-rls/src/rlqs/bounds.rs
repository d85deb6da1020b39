//! Bounds on what one RLQS client may make the server hold: a stream's fields come from
//! clients, so what a stream costs must not follow what it sends. An Envoy sends one bucket per
//! distinct `bucket_id` its matchers build, a handful of keys each.

use tonic::Status;

/// The most buckets one stream may report (over its whole life, until they are abandoned).
pub const MAX_BUCKETS_PER_STREAM: usize = 4096;
/// The most keys one `BucketId` may carry (as many as a descriptor's entries).
pub const MAX_BUCKET_KEYS: usize = crate::limits::MAX_ENTRIES;
/// The most RLQS streams one service holds at once (each Envoy opens one per filter
/// configuration; streams per connection are bounded by the gRPC server's
/// `max_concurrent_streams`).
pub const MAX_STREAMS: usize = 10_000;
/// The most responses waiting for a client that does not read: past it, a new assignment
/// replaces nothing and is dropped (the next report gets a fresh one).
pub(crate) const RESPONSES_QUEUED: usize = 2;

/// A report refused: the stream ends with `INVALID_ARGUMENT` and this reason.
pub(crate) fn malformed(reason: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("malformed RLQS report: {reason}"))
}
