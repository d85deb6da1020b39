//! Run with `cargo bench --bench store_backends` (about a minute and a half; needs `memcached`
//! and `redis-server` on the PATH). Prints one Markdown table. `cargo bench --bench
//! store_backends -- WORDS` runs only the loads whose label contains `WORDS` (e.g. `fixed`).
//!
//! Decisions per second and store round trips per decision on `MemcachedStore` against
//! `RedisStore`, in the same run. Each decision is a whole request through `RateLimitLayer`
//! (around a trivial service, keyed by a header), since that is where leases and the cache of
//! denials live and what an app gets; GCRA. Two layers, each on its own store instance (its
//! own connections, and for memcached its own turns per key), stand for two app instances
//! sharing one backend: 32 requests in flight from one process, 16 on each, on a two-worker
//! tokio runtime, each task sending its next request when its last one is answered.
//!
//! Four loads, each measured on both backends in turn, [`ROUNDS`] times interleaved:
//!
//! - 10,000 keys in turn, a quota far above the load (every answer allowed, every decision
//!   writes);
//! - one hot key, the same quota: the two instances' compare-and-sets on memcached conflict;
//! - one hot key, the same quota, an aligned fixed window: memcached's own arithmetic, no
//!   compare-and-set;
//! - one hot key with `lease = "auto"`: each instance decides locally from units leased in one
//!   store call (the counters are read 1.2 s after the run, so that the leases' give-backs are
//!   counted too);
//! - one hot key at a quota that is hit ([`HOT_LIMIT`] per second between the instances).
//!
//! Round trips come from the servers' own counters, read before and after each run: memcached's
//! `stats` (`cmd_get` counts `mg`, `cmd_set` counts `ms`, `incr_*` and `decr_*` count `ma`
//! but the one that creates a window's counter, refused compare-and-sets are `cas_badval` and
//! `cas_misses`), Redis's `INFO commandstats` (`EVALSHA` and `EVAL` calls: the
//! commands a script runs are counted there too, without a round trip of their own). A store failure would answer 503 (`OnStoreError::Deny`) and is
//! counted.
//!
//! Both servers are private, on free ports, and stopped at the end.

use std::convert::Infallible;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use deadpool_redis::redis;
use http::{HeaderValue, Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate::rules::{Lease, Rule};
use tollgate::store::{MemcachedStore, OnStoreError, RedisStore, Store};
use tollgate::{key, Algorithm, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

/// Requests in flight on each of the two instances.
const PER_INSTANCE: usize = 16;
/// Measured runs of each load on each backend, interleaved.
const ROUNDS: usize = 5;
/// How long one measured run lasts.
const RUN: Duration = Duration::from_millis(1_500);
/// Distinct clients of the spread load, taken in turn.
const KEYS: usize = 10_000;
/// The hot key's quota per second where it is hit.
const HOT_LIMIT: u32 = 5_000;
/// How long after a run with leases its counters are read: leases last at most 1 s.
const LEASE_SETTLE: Duration = Duration::from_millis(1_200);

/// The service behind the layer: answers at once, so what is measured is the layer and the store.
type TrivialService = fn(Request<()>) -> std::future::Ready<Result<Response<Body>, Infallible>>;
type Limited = tollgate::RateLimit<tower::util::ServiceFn<TrivialService>>;

#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Memcached,
    Redis,
}

/// One load: its label, its rule, and how many keys it takes in turn.
struct Load {
    label: &'static str,
    rule: fn() -> Rule,
    keys: usize,
    leased: bool,
}

/// A quota no run exhausts.
fn unlimited() -> Quota {
    Quota::per_second(1_000_000).expect("a valid quota")
}

const LOADS: [Load; 5] = [
    Load {
        label: "10,000 keys in turn",
        rule: || Rule::new("spread", unlimited()),
        keys: KEYS,
        leased: false,
    },
    Load {
        label: "one hot key",
        rule: || Rule::new("hot", unlimited()),
        keys: 1,
        leased: false,
    },
    Load {
        label: "one hot key, fixed window",
        rule: || Rule::new("hot-fixed", unlimited()).algorithm(Algorithm::FixedWindow),
        keys: 1,
        leased: false,
    },
    Load {
        label: "one hot key, `lease = \"auto\"`",
        rule: || Rule::new("leased", unlimited()).lease(Lease::Auto),
        keys: 1,
        leased: true,
    },
    Load {
        label: "one hot key at its limit (5,000/s)",
        rule: || {
            Rule::new(
                "limited",
                Quota::per_second(HOT_LIMIT).expect("a valid quota"),
            )
        },
        keys: 1,
        leased: false,
    },
];

fn main() {
    let memcached = Server::start("memcached", |port| {
        let mut command = Command::new("memcached");
        command.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"]);
        command.args(["-u", "nobody"]);
        command
    });
    let redis = Server::start("redis-server", |port| {
        let mut command = Command::new("redis-server");
        command.args(["--port", &port.to_string(), "--bind", "127.0.0.1"]);
        command.args(["--save", "", "--appendonly", "no"]);
        command
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(memcached.port, redis.port));
}

/// What one measured run counted.
#[derive(Clone, Copy, Default)]
struct Run {
    decisions: u64,
    allowed: u64,
    failed: u64,
    seconds: f64,
    /// Round trips the server counted.
    trips: u64,
    /// Compare-and-sets the server refused (memcached).
    refused: u64,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.decisions as f64 / self.seconds
    }

    fn add(&mut self, other: &Run) {
        self.decisions += other.decisions;
        self.allowed += other.allowed;
        self.failed += other.failed;
        self.seconds += other.seconds;
        self.trips += other.trips;
        self.refused += other.refused;
    }
}

/// The two instances of one load on one backend, and the request keys it takes in turn.
struct Setup {
    backend: Backend,
    instances: [Limited; 2],
    keys: Arc<Vec<HeaderValue>>,
    leased: bool,
}

async fn run(memcached_port: u16, redis_port: u16) {
    let memcached_url = format!("memcache://127.0.0.1:{memcached_port}");
    let redis_url = format!("redis://127.0.0.1:{redis_port}");
    let info = deadpool_redis::Config::from_url(&redis_url)
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .expect("a pool");
    let prefix = format!("backends{}", std::process::id());
    // Words after `--`, if any: only the loads whose label holds them.
    let words: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let loads: Vec<&Load> = LOADS
        .iter()
        .filter(|load| words.is_empty() || words.iter().any(|w| load.label.contains(w.as_str())))
        .collect();
    let mut setups = Vec::new();
    for load in &loads {
        let keys: Vec<HeaderValue> = (0..load.keys)
            .map(|i| HeaderValue::from_str(&format!("client-{i}")).expect("a header value"))
            .collect();
        let keys = Arc::new(keys);
        let memcached = [0, 1].map(|_| {
            let store = MemcachedStore::from_url(&memcached_url).expect("a memcached URL");
            layer(store.prefix(prefix.as_str()), (load.rule)())
        });
        let redis = [0, 1].map(|_| {
            let store = RedisStore::from_url(&redis_url).expect("a Redis URL");
            layer(store.prefix(prefix.as_str()), (load.rule)())
        });
        for (backend, instances) in [(Backend::Memcached, memcached), (Backend::Redis, redis)] {
            setups.push(Setup {
                backend,
                instances,
                keys: Arc::clone(&keys),
                leased: load.leased,
            });
        }
    }

    let counters = Counters {
        memcached_port,
        redis: info,
    };
    // One short unmeasured run of each first: connections made, scripts loaded.
    for setup in &setups {
        measure(setup, &counters, Duration::from_millis(300)).await;
    }
    let mut runs: Vec<Vec<Run>> = setups.iter().map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for (setup, runs) in setups.iter().zip(&mut runs) {
            runs.push(measure(setup, &counters, RUN).await);
        }
    }

    println!(
        "| load | memcached decisions/s | Redis decisions/s | memcached / Redis | \
         memcached round trips per decision (`mg` + `ms` + `ma`) | refused compare-and-sets per \
         decision | Redis round trips per decision | allowed, memcached / Redis |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (load, pair) in loads.iter().zip(runs.chunks(2)) {
        let (memcached, redis) = (&pair[0], &pair[1]);
        let ratios: Vec<f64> = memcached
            .iter()
            .zip(redis)
            .map(|(m, r)| m.per_second() / r.per_second())
            .collect();
        let (m, r) = (total(memcached), total(redis));
        println!(
            "| {} | {:.0} | {:.0} | {:.2}× | {:.3} | {:.3} | {:.3} | {} / {} |",
            load.label,
            median(memcached.iter().map(Run::per_second).collect()),
            median(redis.iter().map(Run::per_second).collect()),
            median(ratios),
            m.trips as f64 / m.decisions as f64,
            m.refused as f64 / m.decisions as f64,
            r.trips as f64 / r.decisions as f64,
            share(&m),
            share(&r),
        );
        for (name, t) in [("memcached", &m), ("Redis", &r)] {
            if t.failed > 0 {
                println!("| ↳ {name}: {} store failures (503) |", t.failed);
            }
        }
    }
    println!();
    let limited = loads
        .iter()
        .position(|load| load.label.contains("at its limit"));
    let limited = limited.map_or(&[][..], |at| &runs[2 * at..2 * at + 2]);
    for (name, runs) in ["memcached", "Redis"].iter().zip(limited) {
        let t = total(runs);
        println!(
            "At the limit on {name}: {:.0} allowed per second against a quota of {HOT_LIMIT}/s.",
            t.allowed as f64 / t.seconds
        );
    }
    println!(
        "Medians of {ROUNDS} interleaved runs of {:.1} s; round trips over all runs. 2 instances \
         × {PER_INSTANCE} requests in flight; {} cores, memcached {}, redis-server {}.",
        RUN.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        counters.memcached_version().await,
        counters.redis_version().await,
    );
}

fn share(run: &Run) -> String {
    format!("{:.0}%", 100.0 * run.allowed as f64 / run.decisions as f64)
}

fn total(runs: &[Run]) -> Run {
    let mut sum = Run::default();
    for run in runs {
        sum.add(run);
    }
    sum
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A layer of `rule` on `store`, keyed by the `x-api-key` header, around a trivial service.
fn layer(store: impl Store, rule: Rule) -> Limited {
    let layer = RateLimitLayer::builder()
        .rule(rule)
        .key(key::Header::new("x-api-key"))
        .on_store_error(OnStoreError::Deny)
        .store(store)
        .build()
        .expect("a valid layer");
    let trivial: TrivialService = |_| std::future::ready(Ok(Response::new(Body::empty())));
    layer.layer(tower::service_fn(trivial))
}

/// Runs `setup` for `length` from both instances at once, and reads the server's counters
/// around it.
async fn measure(setup: &Setup, counters: &Counters, length: Duration) -> Run {
    let before = counters.read(setup.backend).await;
    let next = Arc::new(AtomicUsize::new(0));
    let [allowed, denied, failed] = [0; 3].map(|_| Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = (0..2 * PER_INSTANCE)
        .map(|task| {
            let service = setup.instances[task % 2].clone();
            let keys = Arc::clone(&setup.keys);
            let next = Arc::clone(&next);
            let counts = [&allowed, &denied, &failed].map(Arc::clone);
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let i = next.fetch_add(1, Ordering::Relaxed) % keys.len();
                    let mut request = Request::new(());
                    request.headers_mut().insert("x-api-key", keys[i].clone());
                    let response = service.clone().oneshot(request).await;
                    let counted = match response.expect("infallible").status().as_u16() {
                        200 => &counts[0],
                        429 => &counts[1],
                        _ => &counts[2],
                    };
                    counted.fetch_add(1, Ordering::Relaxed);
                    // A request answered at once (from a lease) awaits nothing: without this,
                    // the loop would never give the worker back, and the store calls it waits
                    // on (a lease's refill, Redis's replies) would starve past their timeout.
                    // A server's requests arrive through the network, which yields.
                    tokio::task::consume_budget().await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task ran to its end");
    }
    let seconds = start.elapsed().as_secs_f64();
    if setup.leased {
        tokio::time::sleep(LEASE_SETTLE).await;
    }
    let after = counters.read(setup.backend).await;
    let [allowed, denied, failed] = [allowed, denied, failed].map(|n| n.load(Ordering::Relaxed));
    Run {
        decisions: allowed + denied + failed,
        allowed,
        failed,
        seconds,
        trips: after.0 - before.0,
        refused: after.1 - before.1,
    }
}

/// Redis's script calls in `INFO commandstats`: the commands a script runs are counted there
/// too, but travel no network.
const SCRIPT_CALLS: [&str; 4] = [
    "cmdstat_evalsha:",
    "cmdstat_eval:",
    "cmdstat_evalsha_ro:",
    "cmdstat_eval_ro:",
];

/// Reads the servers' counters.
struct Counters {
    memcached_port: u16,
    redis: deadpool_redis::Pool,
}

impl Counters {
    /// Round trips and refused compare-and-sets so far.
    async fn read(&self, backend: Backend) -> (u64, u64) {
        match backend {
            Backend::Memcached => {
                let stats = self.memcached_stats().await;
                let sum = |names: &[&str]| -> u64 {
                    names
                        .iter()
                        .map(|name| {
                            stats
                                .iter()
                                .find(|(n, _)| n == name)
                                .and_then(|(_, v)| v.parse::<u64>().ok())
                                .unwrap_or_else(|| panic!("memcached stats without {name}"))
                        })
                        .sum()
                };
                (
                    sum(&[
                        "cmd_get",
                        "cmd_set",
                        "incr_hits",
                        "incr_misses",
                        "decr_hits",
                        "decr_misses",
                        "cmd_touch",
                        "delete_hits",
                        "delete_misses",
                    ]),
                    sum(&["cas_badval", "cas_misses"]),
                )
            }
            Backend::Redis => {
                let info = self.redis_info("commandstats").await;
                let calls = info
                    .lines()
                    .filter(|l| SCRIPT_CALLS.iter().any(|call| l.starts_with(call)))
                    .filter_map(|l| {
                        l.split_once("calls=")?
                            .1
                            .split(',')
                            .next()?
                            .parse::<u64>()
                            .ok()
                    })
                    .sum::<u64>();
                (calls, 0)
            }
        }
    }

    /// memcached's `stats`, as (name, value) pairs.
    async fn memcached_stats(&self) -> Vec<(String, String)> {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.memcached_port))
            .await
            .expect("memcached answers");
        stream.write_all(b"stats\r\n").await.expect("stats sent");
        let mut reply = Vec::new();
        while !reply.ends_with(b"END\r\n") {
            let mut chunk = [0; 4096];
            let n = stream.read(&mut chunk).await.expect("stats read");
            assert!(n > 0, "memcached closed the connection");
            reply.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&reply)
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("STAT"), Some(name), Some(value)) => {
                        Some((name.to_owned(), value.to_owned()))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    async fn redis_info(&self, section: &str) -> String {
        let mut conn = self.redis.get().await.expect("a Redis connection");
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut conn)
            .await
            .expect("INFO")
    }

    async fn memcached_version(&self) -> String {
        let stats = self.memcached_stats().await;
        let version = stats.iter().find(|(name, _)| name == "version");
        version.map_or("?".to_owned(), |(_, v)| v.clone())
    }

    async fn redis_version(&self) -> String {
        let info = self.redis_info("server").await;
        info.lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_owned()
    }
}

/// A server this benchmark started on a free port, stopped on drop.
struct Server {
    port: u16,
    child: Child,
}

impl Server {
    fn start(name: &str, command: impl FnOnce(u16) -> Command) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = command(port)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{name} must be installed: {e}"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "{name} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { port, child }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
