//! Tests of what only the crate can call on its stores (stacked decisions in one call,
//! leases, refunds), against real redis-servers, clusters and sentinels: the memory store and
//! the Redis store decide alike, atomically, and exactly. The layer's own behaviour is tested
//! through its public face in `tests/integration/`, whose helpers (`tests/support/`) these
//! share.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod cluster;
mod denial_cache;
mod leases;
mod redis;
mod sentinel;
mod stacked;
