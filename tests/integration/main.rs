//! The integration tests: one crate, one binary, each suite a module, every helper (Redis
//! servers, clusters, sentinels, HTTP servers and clients) once, in `tests/support/`.
//!
//! Run them all with `cargo test --all-features --test integration`, one suite with a filter,
//! e.g. `cargo test --all-features --test integration redis_cluster::`. The quickstart suite
//! runs the example's binary: `cargo build --example quickstart` first when filtering.

#[path = "../support/mod.rs"]
mod support;

/// A handler that answers every request `200` with an empty body: what a layer wraps in the
/// suites that call the service directly, without HTTP. (Here, not in `tests/support/`, which
/// tollgate-rls's tests include too, without `http` and `tower`.)
fn ok_service() -> impl tower::Service<
    ::http::Request<()>,
    Response = ::http::Response<String>,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone {
    tower::service_fn(|_: ::http::Request<()>| async {
        Ok::<_, std::convert::Infallible>(::http::Response::new(String::new()))
    })
}

mod allow_list;
mod client_control;
mod concurrency;
mod count_status;
mod decided_at_once;
mod denial_cache;
mod failover;
mod grpc;
mod http;
mod memcached_store;
mod metrics;
mod peek;
mod quickstart;
mod redis_cluster;
mod redis_sentinel;
mod redis_store;
mod redis_tls;
mod rls_charging;
mod rls_limits;
mod rls_service;
mod rules;
#[cfg(unix)]
mod rules_file_faults;
mod simulate;
mod state_store;
mod store_outage_log;
