//! The built `tollgate-rls`'s statistics under load nobody reads: its memory stays flat while
//! `/metrics` is never scraped, and request values chosen by clients (detailed_metric values,
//! unknown domains) cannot make `/metrics` grow without bound.

mod support;

use std::time::{Duration, Instant};

use support::{ask, request, RedisServer, Rls, Runtime};
use tollgate::rls::proto::rate_limit_response::Code;
use tollgate::rls::proto::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;

/// The resident memory of a process, in bytes (`VmRSS` of `/proc/PID/status`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// Sends requests from `in_flight` tasks over `client` until `until`; how many were answered.
async fn load(client: &RateLimitServiceClient<Channel>, in_flight: usize, until: Instant) -> u64 {
    let mut tasks = Vec::new();
    for task in 0..in_flight {
        let mut client = client.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("k{}", task % 8);
            let mut answered = 0u64;
            while Instant::now() < until {
                let r = ask(&mut client, request("load", &[&[("key", &key)]])).await;
                assert_eq!(r.overall_code, OK);
                answered += 1;
            }
            answered
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total
}

const LOAD: &str = "\
domain: load
descriptors:
  - key: key
    rate_limit: { unit: hour, requests_per_unit: 1000000000 }
";

/// Memory the server may gain over the measured 20 s whatever its speed: buffers and the
/// allocator settling.
const SETTLING: u64 = 256 * 1024;

/// Memory it may gain per decision. Unscraped histogram samples cost about 17 bytes each here
/// (one per decision, in `tollgate_store_duration_seconds`) until something folds them in.
const PER_DECISION: u64 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_flat_under_redis_load_with_no_scrape() {
    let redis = RedisServer::start();
    let runtime = Runtime::new("unscraped");
    runtime.write("load.yaml", LOAD);
    let url = format!("127.0.0.1:{}", redis.port);
    let rls = Rls::start(
        &runtime,
        &[
            ("REDIS_URL", url.as_str()),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("STORE_TIMEOUT", "5s"),
            ("LOG_LEVEL", "warn"),
        ],
    );
    let client = rls.client().await;
    // Warm-up: connections, buffers and the allocator's arenas reach their working size.
    let warm = load(&client, 32, Instant::now() + Duration::from_secs(6)).await;
    let before = rss(rls.pid());
    let decided = load(&client, 32, Instant::now() + Duration::from_secs(20)).await;
    let after = rss(rls.pid());
    let grown = after.saturating_sub(before);
    eprintln!(
        "warm-up {warm}, then {decided} decisions in 20 s; RSS {before} -> {after} (+{grown} bytes)"
    );
    assert!(decided > 10_000, "only {decided} decisions in 20 s");
    // The target at full speed (a release build does several times more decisions in 20 s
    // than a test build on a shared machine), and the same bound per decision.
    assert!(
        grown <= 2 * 1024 * 1024 && grown <= SETTLING + PER_DECISION * decided,
        "RSS grew by {grown} bytes over {decided} decisions with no scrape"
    );
}
