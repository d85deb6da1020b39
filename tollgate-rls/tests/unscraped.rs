//! The built `tollgate-rls` under 20 s of load on Redis with nobody reading `/metrics`: its
//! memory stays flat (alone in its test binary, so that nothing else runs beside it).

mod support;

use std::time::{Duration, Instant};

use support::{ask, request, RedisServer, Rls, Runtime};
use tollgate_rls::proto::rate_limit_response::Code;
use tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient;
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

/// Steady growth the server may show over the measured 20 s whatever its speed.
const STEADY_ALLOWANCE: u64 = 100 * 1024;

/// Steady growth it may show per decision. Unscraped histogram samples cost about 26 bytes a
/// decision here (two samples: `tollgate_store_duration_seconds` and
/// `ratelimit_service_response_time_seconds`) until something folds them in.
const PER_DECISION: u64 = 8;

/// The growth of a series of RSS readings that goes on at every step: the median step times
/// the number of steps. A leak grows at every step; a buffer or an allocator arena that
/// grows once (a step of about 500 KiB was seen on a busy machine) does not count.
fn steady_growth(readings: &[u64]) -> u64 {
    let mut steps: Vec<i64> = (readings.windows(2))
        .map(|w| w[1] as i64 - w[0] as i64)
        .collect();
    steps.sort_unstable();
    let median = steps.get(steps.len() / 2).copied().unwrap_or(0).max(0) as u64;
    median * steps.len() as u64
}

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
    // Warm-up: connections, buffers and the allocator's arenas reach their working size
    // (at least 10,000 decisions, however busy the machine).
    let started = Instant::now();
    let mut warm = 0;
    while warm < 10_000 && started.elapsed() < Duration::from_secs(90) {
        warm += load(&client, 32, Instant::now() + Duration::from_secs(2)).await;
    }
    let pid = rls.pid();
    let until = Instant::now() + Duration::from_secs(20);
    let readings = tokio::spawn(async move {
        let mut readings = vec![rss(pid)];
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_secs(1)).await;
            readings.push(rss(pid));
        }
        readings
    });
    let decided = load(&client, 32, until).await;
    let readings = readings.await.unwrap();
    let (before, after) = (readings[0], readings[readings.len() - 1]);
    let grown = after.saturating_sub(before);
    let steady = steady_growth(&readings);
    eprintln!(
        "warm-up {warm}, then {decided} decisions in 20 s; RSS {before} -> {after} (+{grown} \
         bytes, {steady} steady): {readings:?}"
    );
    assert!(decided > 5_000, "only {decided} decisions in 20 s");
    // The target, and no growth that goes on with the decisions: a release build does
    // several times more decisions in 20 s than a test build on a shared machine.
    assert!(
        grown <= 2 * 1024 * 1024,
        "RSS grew by {grown} bytes with no scrape"
    );
    assert!(
        steady <= STEADY_ALLOWANCE + PER_DECISION * decided,
        "RSS grew steadily by {steady} bytes over {decided} decisions with no scrape"
    );
}
