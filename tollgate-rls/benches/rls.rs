//! Run with `cargo bench -p tollgate-rls --bench rls` (it starts its own redis-server on a free port).
//!
//! `ShouldRateLimit` over loopback, as Envoy calls it: 32 requests in flight on one HTTP/2
//! connection for 3 s, against `tollgate_rls::RateLimitService` on the memory store and on
//! Redis, and against a bare tonic service of the same protocol that decides nothing (the
//! floor). Prints one Markdown table: decisions per second, p50/p99 latency, the share of the
//! floor (measured again just before each row, so that a busy machine weighs on both alike),
//! and on Redis the script calls and all commands (those inside the script included) per
//! decision, from `INFO commandstats`. Metrics are recorded into a Prometheus recorder, as the
//! `tollgate-rls` binary does.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_redis::redis;
use tollgate::store::Store;
use tollgate::store::{MemoryStore, RedisStore};
use tollgate_rls::proto::rate_limit_descriptor::Entry;
use tollgate_rls::proto::rate_limit_response::{Code, DescriptorStatus};
use tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::proto::rate_limit_service_server::{
    RateLimitService as RlsTrait, RateLimitServiceServer,
};
use tollgate_rls::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use tollgate_rls::{RateLimitService, RlsConfig};
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};

const IN_FLIGHT: usize = 32;
const WARM_UP: Duration = Duration::from_millis(500);
/// Turns of the floor and the service, and how long each lasts.
const ROUNDS: usize = 3;
const SLICE: Duration = Duration::from_secs(1);
const DISTINCT: u64 = 100_000;

const CONFIG: &str = "
domain: bench
descriptors:
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: 1000000000 }
  - key: user
    rate_limit: { unit: day, requests_per_unit: 100000 }
  - key: path
    rate_limit: { unit: day, requests_per_unit: 100000 }
";

/// Which descriptors each request carries.
#[derive(Clone, Copy)]
enum Shape {
    /// One descriptor, the same value every time.
    Hot,
    /// One descriptor, 100,000 values in turn.
    Distinct,
    /// Three descriptors: a hot one and two of 100,000 values.
    Three,
}

/// The floor: the same protocol, nothing decided.
struct Echo;

#[tonic::async_trait]
impl RlsTrait for Echo {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let statuses = (request.get_ref().descriptors.iter())
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            })
            .collect();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..RateLimitResponse::default()
        }))
    }
}

struct Measured {
    per_second: f64,
    decisions: u64,
    /// Every request's latency in µs, sorted.
    latencies: Vec<u32>,
}

impl Measured {
    fn new(mut latencies: Vec<u32>, took: Duration) -> Self {
        latencies.sort_unstable();
        Self {
            per_second: latencies.len() as f64 / took.as_secs_f64().max(1e-9),
            decisions: latencies.len() as u64,
            latencies,
        }
    }

    /// Slices of equal length, as one.
    fn merge(slices: Vec<Measured>) -> Self {
        let n = slices.len().max(1) as f64;
        let per_second = slices.iter().map(|m| m.per_second).sum::<f64>() / n;
        let latencies: Vec<u32> = slices.into_iter().flat_map(|m| m.latencies).collect();
        let mut merged = Self::new(latencies, Duration::from_secs(1));
        merged.per_second = per_second;
        merged
    }

    fn quantile(&self, q: f64) -> u32 {
        let at = (self.latencies.len() as f64 * q) as usize;
        self.latencies
            .get(at.min(self.latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    }
}

fn main() {
    // The recorder the binary installs: stats are part of the cost.
    let _ = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder();
    let mut redis = RedisServer::start();
    let server_rt = runtime("rls-server");
    let client_rt = runtime("rls-client");

    println!(
        "| service | store | descriptors per request | decisions/s | p50 µs | p99 µs | \
         floor decisions/s | of the floor | script calls per decision | Redis commands per \
         decision |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let floor = server_rt.block_on(serve(Routes::new(RateLimitServiceServer::new(Echo))));
    let cases: [(&str, Shape, &str); 3] = [
        ("1, one value", Shape::Hot, "hot"),
        ("1, 100k values", Shape::Distinct, "distinct"),
        ("3 (1 hot + 2 of 100k values)", Shape::Three, "three"),
    ];
    for (label, shape, name) in cases {
        let service = build(MemoryStore::new());
        let addr = server_rt.block_on(serve(Routes::new(service.into_server())));
        let c = client_rt.block_on(compare(floor, addr, shape, || {}));
        row("memory", label, &c, None);

        let url = format!("redis://127.0.0.1:{}", redis.port);
        let store = RedisStore::from_url(&url).expect("redis url").prefix(name);
        let service = build(store);
        let addr = server_rt.block_on(serve(Routes::new(service.into_server())));
        // Scripts loaded and the connection made before counting from zero (the floor's
        // slices do not touch Redis).
        let c = client_rt.block_on(compare(floor, addr, shape, || redis.reset_stats()));
        let (scripts, all) = redis.calls();
        let per = |n: u64| n as f64 / c.service.decisions.max(1) as f64;
        row("redis", label, &c, Some((per(scripts), per(all))));
    }
}

/// The service against the floor, in turns: `ROUNDS` slices of each, alternating, so that
/// whatever else the machine does weighs on both alike. `before` runs once both are warm.
async fn compare(
    floor: SocketAddr,
    service: SocketAddr,
    shape: Shape,
    before: impl FnOnce(),
) -> Compared {
    load_for(floor, shape, WARM_UP, Duration::ZERO).await;
    load_for(service, shape, WARM_UP, Duration::ZERO).await;
    before();
    let (mut floors, mut services, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let f = load_for(floor, shape, Duration::ZERO, SLICE).await;
        let s = load_for(service, shape, Duration::ZERO, SLICE).await;
        ratios.push(s.per_second / f.per_second.max(1e-9));
        floors.push(f);
        services.push(s);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Compared {
        floor_per_second: median(floors.iter().map(|f| f.per_second).collect()),
        ratio: median(ratios),
        service: Measured::merge(services),
    }
}

struct Compared {
    service: Measured,
    floor_per_second: f64,
    ratio: f64,
}

fn runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("runtime")
}

fn build(store: impl Store) -> RateLimitService {
    let config = RlsConfig::from_yaml(
        [("bench.yaml", CONFIG)],
        tollgate_rls::DuplicateDomains::Refuse,
    )
    .expect("config");
    RateLimitService::builder()
        .config(config)
        .store(store)
        .build()
        .expect("service")
}

async fn serve(routes: Routes) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(
        Server::builder()
            .tcp_nodelay(true)
            .add_routes(routes)
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true))),
    );
    addr
}

fn row(store: &str, shape: &str, c: &Compared, redis: Option<(f64, f64)>) {
    let (scripts, all) = match redis {
        Some((s, a)) => (format!("{s:.2}"), format!("{a:.2}")),
        None => ("-".into(), "-".into()),
    };
    let m = &c.service;
    println!(
        "| tollgate-rls | {store} | {shape} | {:.0} | {} | {} | {:.0} | {:.2} | {scripts} | {all} |",
        m.per_second,
        m.quantile(0.50),
        m.quantile(0.99),
        c.floor_per_second,
        c.ratio,
    );
}

/// `IN_FLIGHT` loops on one connection: `warm_up` unmeasured, then `measure`.
async fn load_for(
    addr: SocketAddr,
    shape: Shape,
    warm_up: Duration,
    measure: Duration,
) -> Measured {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connect");
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now() + warm_up;
    let end = start + measure;
    let mut tasks = Vec::new();
    for _ in 0..IN_FLIGHT {
        let mut client = RateLimitServiceClient::new(channel.clone());
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(100_000);
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let sent = Instant::now();
                if sent >= end {
                    return latencies;
                }
                let response = client
                    .should_rate_limit(request(shape, n))
                    .await
                    .expect("answer");
                assert_eq!(response.get_ref().overall_code, Code::Ok as i32);
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
    Measured::new(all, measure)
}

fn request(shape: Shape, n: u64) -> RateLimitRequest {
    let entry = |key: &str, value: String| RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value,
        }],
        ..RateLimitDescriptor::default()
    };
    let descriptors = match shape {
        Shape::Hot => vec![entry("tenant", "acme".into())],
        Shape::Distinct => vec![entry("user", format!("u{}", n % DISTINCT))],
        Shape::Three => vec![
            entry("tenant", "acme".into()),
            entry("user", format!("u{}", n % DISTINCT)),
            entry("path", format!("/p{}", (n * 7) % DISTINCT)),
        ],
    };
    RateLimitRequest {
        domain: "bench".into(),
        descriptors,
        hits_addend: 0,
    }
}

/// A redis-server of the bench's own, on a free port.
struct RedisServer {
    port: u16,
    child: Child,
    conn: redis::Connection,
}

impl RedisServer {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let deadline = Instant::now() + Duration::from_secs(10);
        let conn = loop {
            match redis::Client::open(format!("redis://127.0.0.1:{port}"))
                .and_then(|c| c.get_connection())
            {
                Ok(conn) => break conn,
                Err(e) if Instant::now() > deadline => panic!("redis-server did not start: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        Self { port, child, conn }
    }

    fn reset_stats(&mut self) {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut self.conn)
            .expect("RESETSTAT");
    }

    /// (script calls, every command but INFO and CONFIG) since the last reset.
    fn calls(&mut self) -> (u64, u64) {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn)
            .expect("INFO");
        let (mut scripts, mut all) = (0, 0);
        for line in info.lines() {
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(":calls="))
            else {
                continue;
            };
            let calls: u64 = rest
                .split(',')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if name == "evalsha" || name == "eval" {
                scripts += calls;
            }
            if !["info", "config"].contains(&name) {
                all += calls;
            }
        }
        (scripts, all)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
