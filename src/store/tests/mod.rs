//! Tests of what only the crate can call on its stores (stacked decisions in one call,
//! leases, refunds), against real redis-servers, clusters and sentinels: the memory store and
//! the Redis store decide alike, atomically, and exactly. The layer's own behaviour is tested
//! through its public face in `tests/integration/`, whose helpers (the workspace's
//! `tollgate-test-kit`) these share.

use tollgate_test_kit as support;

mod changed_quota;
mod cluster;
mod denial_cache;
mod leases;
mod plain_counters;
mod redis;
mod sentinel;
mod stacked;
