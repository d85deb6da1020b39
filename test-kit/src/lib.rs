//! What tollgate's tests share: real redis-servers (alone, in a cluster, behind sentinels, over
//! TLS), free loopback ports, HTTP clients, captured logs. Used by the library's unit tests, its
//! integration tests and tollgate-rls's.

use std::net::SocketAddr;
use std::process::Command;

use axum::Router;

mod cluster;
pub mod dns;
pub mod log;
pub mod memcached;
mod ports;
mod process;
mod redis;
mod sentinel;
mod spawned;
mod tls;
mod unique;

pub use cluster::RedisCluster;
pub use ports::{free_cluster_port, free_port, wait_for_port};
pub use process::ServerProcess;
pub use redis::{command_calls, redis_cli, redis_connection, shared_redis_url, RedisServer};
pub use sentinel::RedisSentinel;
pub use spawned::Spawned;
pub use tls::{make_certificate, make_signed_certificate, SecureRedis};
pub use unique::{rules_file, temp_dir, unique_prefix};

/// The Redis client the kit's connections are (deadpool-redis's `redis`), for tests that send
/// commands of their own (`redis_client::pipe()`, `redis_client::Commands`).
pub use deadpool_redis::redis as redis_client;

/// Set in a process started by [`alone`]: the name of the test it runs.
const ALONE: &str = "TOLLGATE_TEST_ALONE";

/// Runs `body`, the test `name` (its path in this binary: `suite::test`), alone in a process of
/// its own, for a test that reads process-wide state the other suites of this binary would add
/// to while it runs: a global `tracing` subscriber or metrics recorder, which the library's own
/// threads (the rules file's watcher) report to. Here it runs this test binary again with only
/// `name`, and passes if that run ran it and it passed; in that process it runs `body`.
pub fn alone(name: &str, body: impl FnOnce()) {
    if std::env::var(ALONE).as_deref() == Ok(name) {
        body();
        return;
    }
    let binary = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(binary)
        .args([name, "--exact", "--test-threads", "1"])
        .env(ALONE, name)
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name}, alone in a process of its own:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs `test` on a current-thread runtime: for a test run [`alone`], whose body is not async.
pub fn block_on(test: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(test);
}

/// Serves `app` on a free loopback port, with the peer address available to key extractors.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// An HTTP client over loopback.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("http client")
}
