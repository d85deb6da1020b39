//! The integration tests: one crate, one binary, each suite a module. The helpers every test
//! crate shares (Redis servers, clusters, sentinels, HTTP servers and clients) are the workspace's
//! `tollgate-test-kit` (`test-kit/`); what names tollgate's types is here.
//!
//! Run them all with `cargo test --all-features --test integration`, one suite with a filter,
//! e.g. `cargo test --all-features --test integration redis_cluster::`. The quickstart suite
//! runs the example's binary: `cargo build --example quickstart` first when filtering.

mod built_in;
use tollgate_test_kit as support;

/// A handler that answers every request `200` with an empty body: what a layer wraps in the
/// suites that call the service directly, without HTTP. (Here, not in the test kit, which
/// names no tollgate type.)
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
mod client_quotas;
mod concurrency;
mod count_status;
mod decided_at_once;
mod denial_cache;
mod door;
mod failover;
mod grpc;
mod http;
mod in_flight;
mod llm_budget;
mod memcached_srv;
mod memcached_store;
mod metrics;
mod own_store;
mod peek;
mod quickstart;
mod quickstart_in_flight;
mod redis_cluster;
mod redis_sentinel;
mod redis_store;
mod redis_tls;
mod response_cost;
mod response_cost_grpc;
mod rules;
#[cfg(unix)]
mod rules_file_faults;
mod state_store;
mod store_outage_log;
mod tenants;
