//! A load generator for a rate limit service, as its own process (used by
//! `scripts/bench_rls.sh`): one HTTP/2 connection to `ADDR`, `IN_FLIGHT` requests kept in flight
//! (closed loop: each answer sends the next request) for `SECONDS` after half a second of
//! warm-up, on one runtime thread.
//!
//! `cargo run --release --example rls_load -- ADDR IN_FLIGHT SECONDS one|100k`
//!
//! `one` sends domain `hot` with descriptor `tenant=acme` every time; `100k` sends domain
//! `distinct` with `user=u0` … `user=u99999` in turn. Prints one line,
//! `decisions_per_second p50_us p99_us answered` (`answered` counts the warm-up too, to divide
//! a server's own counters by), and exits with status 1 if any answer was an error or
//! not `OK` (the limits in the benchmark are far above what it sends).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tollgate_rls::proto::rate_limit_descriptor::Entry;
use tollgate_rls::proto::rate_limit_response::Code;
use tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::proto::{RateLimitDescriptor, RateLimitRequest};
use tonic::transport::Channel;

const WARM_UP: Duration = Duration::from_millis(500);
const DISTINCT: u64 = 100_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, in_flight, seconds, values] = args.as_slice() else {
        eprintln!("usage: rls_load ADDR IN_FLIGHT SECONDS one|100k");
        std::process::exit(2);
    };
    let in_flight: usize = in_flight.parse().expect("IN_FLIGHT: a number");
    let seconds: f64 = seconds.parse().expect("SECONDS: a number");
    let distinct = match values.as_str() {
        "one" => false,
        "100k" => true,
        other => panic!("values {other:?}: expected one or 100k"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let measure = Duration::from_secs_f64(seconds);
    let (latencies, answered, (failures, first_failure)) =
        runtime.block_on(load(addr.clone(), in_flight, measure, distinct));
    let quantile = |q: f64| {
        let at = (latencies.len() as f64 * q) as usize;
        latencies
            .get(at.min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{:.0} {} {} {answered}",
        latencies.len() as f64 / measure.as_secs_f64(),
        quantile(0.50),
        quantile(0.99)
    );
    if failures > 0 {
        eprintln!(
            "rls_load: {failures} answer(s) were errors or not OK, the first {first_failure}"
        );
        std::process::exit(1);
    }
}

/// Every measured request's latency in µs, sorted; how many requests were answered, warm-up
/// included; how many answers failed, and the first failure.
async fn load(
    addr: String,
    in_flight: usize,
    measure: Duration,
    distinct: bool,
) -> (Vec<u32>, u64, (u64, String)) {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("address")
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connect");
    let next = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let first_failure = Arc::new(OnceLock::new());
    let start = Instant::now() + WARM_UP;
    let end = start + measure;
    let mut tasks = Vec::new();
    for _ in 0..in_flight {
        let mut client = RateLimitServiceClient::new(channel.clone());
        let (next, answered, failures, first_failure) = (
            Arc::clone(&next),
            Arc::clone(&answered),
            Arc::clone(&failures),
            Arc::clone(&first_failure),
        );
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(200_000);
            loop {
                let sent = Instant::now();
                if sent >= end {
                    return latencies;
                }
                let n = next.fetch_add(1, Ordering::Relaxed);
                let failed = match client.should_rate_limit(request(distinct, n)).await {
                    Ok(answer) if answer.get_ref().overall_code == Code::Ok as i32 => None,
                    Ok(answer) => Some(format!("code {}", answer.get_ref().overall_code)),
                    Err(status) => Some(format!("{:?}: {}", status.code(), status.message())),
                };
                answered.fetch_add(1, Ordering::Relaxed);
                if let Some(failed) = failed {
                    failures.fetch_add(1, Ordering::Relaxed);
                    let _ = first_failure.set(failed);
                }
                if sent >= start {
                    latencies.push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX));
                }
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("load task"));
    }
    all.sort_unstable();
    let first_failure = first_failure.get().cloned().unwrap_or_default();
    (
        all,
        answered.load(Ordering::Relaxed),
        (failures.load(Ordering::Relaxed), first_failure),
    )
}

fn request(distinct: bool, n: u64) -> RateLimitRequest {
    let (domain, key, value) = match distinct {
        false => ("hot", "tenant", "acme".to_string()),
        true => ("distinct", "user", format!("u{}", n % DISTINCT)),
    };
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value,
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}
