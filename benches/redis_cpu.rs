//! Run with `cargo bench --bench redis_cpu` (about half a minute). Prints one Markdown table.
//!
//! What a decision on the Redis path costs the app's CPU, against the floor of any Redis rate
//! limiter: a bare redis-rs client sending the same script with `EVALSHA` through the same
//! deadpool-redis pool. CPU time, not wall time: the process's CPU time
//! (`CLOCK_PROCESS_CPUTIME_ID`, every thread of the tokio runtime) per decision, so the round
//! trip's waiting and redis-server's own work (another process) are not counted, and neither is
//! the time other processes on a shared machine hold the cores.
//!
//! Four ways of deciding, each at 1, 8 and 64 requests in flight (tasks on a two-worker tokio
//! runtime, each sending its next request when its last one is answered):
//!
//! - `bare redis-rs`: one multiplexed connection taken from the pool once per task, and per
//!   decision `EVALSHA <sha> 1 <key> <limit> <period> <burst> <interval> 1 ""`, the reply read
//!   as `Vec<i64>`; the keys are written before measuring;
//! - the same inside `tokio::time::timeout` of 50 ms, as the layer bounds every store call (a
//!   pending timer makes the runtime park with a timeout, which the kernel arms for each park:
//!   on this VM that is most of what a timeout costs);
//! - `RedisStore::check`: tollgate's store through the [`Store`] trait, the call a user's own
//!   code makes, with the same keys, script and arguments;
//! - `RateLimitLayer`: a whole request through the layer on that store (the cache of denials,
//!   the store timeout and circuit breaker included) around a trivial service, keyed by a
//!   header.
//!
//! Every way runs [`ROUNDS`] times, interleaved with the others, and the median is shown. GCRA,
//! a quota no request exhausts (every decision writes), [`KEYS`] clients in turn.
//!
//! Redis: `TOLLGATE_REDIS_URL` if set (its keys are left alone: everything here is under a
//! prefix of this run's own), else a private redis-server on a free port, stopped at the end.

use std::convert::Infallible;
use std::future::Future;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use deadpool_redis::redis::{self, aio::MultiplexedConnection, Script};
use deadpool_redis::{Pool, Runtime};
use http::{HeaderValue, Request, Response};
use tollgate::store::RedisStore;
use tollgate::{
    key,
    store::{Policy, Store},
    Algorithm, HeaderStyle, Quota, RateLimitLayer,
};
use tower::{Layer, ServiceExt};

/// Requests in flight.
const CONCURRENCY: [usize; 3] = [1, 8, 64];
/// Decisions per measured run, per concurrency.
const DECISIONS: [usize; 3] = [4_000, 12_000, 20_000];
/// Measured runs of each way, interleaved.
const ROUNDS: usize = 5;
/// Distinct clients, taken in turn.
const KEYS: usize = 10_000;
/// The service behind the layer: answers at once, so what is measured is the layer and the store.
type TrivialService = fn(Request<()>) -> std::future::Ready<Result<Response<Body>, Infallible>>;

/// A quota no run exhausts, so every decision is an allow that writes.
fn quota() -> Quota {
    Quota::per_second(1_000_000).expect("a valid quota")
}

/// The script tollgate runs for GCRA, assembled as `src/store/redis/script.rs` assembles it:
/// the prelude, the request reader, the algorithm. The benchmark checks that Redis knows its
/// SHA once tollgate has run it, so a change to the assembly cannot go unnoticed.
const GCRA_SCRIPT: &str = concat!(
    include_str!("../src/store/redis/lua/prelude.lua"),
    "\n",
    include_str!("../src/store/redis/lua/request.lua"),
    "\n",
    include_str!("../src/store/redis/lua/gcra.lua")
);

fn main() {
    let server = match std::env::var("TOLLGATE_REDIS_URL") {
        Ok(url) => Server { url, child: None },
        Err(_) => Server::start(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(&server.url));
}

/// One way of deciding: `decide(i)` decides for the `i`-th key.
trait Way: Send + Sync + 'static {
    fn decide(&self, i: usize, conn: &mut MultiplexedConnection)
        -> impl Future<Output = ()> + Send;
}

async fn run(url: &str) {
    let pool = deadpool_redis::Config::from_url(url)
        .create_pool(Some(Runtime::Tokio1))
        .expect("a pool");
    let prefix = format!("cpu{}", std::process::id());
    let store = RedisStore::from_pool(pool.clone()).prefix(prefix.as_str());
    let policy = Policy::new("bench", quota(), Algorithm::Gcra).expect("a valid policy");
    let clients: Vec<String> = (0..KEYS).map(|i| format!("client-{i}")).collect();

    // tollgate first, so that the script is loaded, then the check that the bare client sends
    // the very same script.
    assert!(store.check(&clients[0], &policy, 1).await.unwrap().allowed);
    let sha = Script::new(GCRA_SCRIPT).get_hash().to_owned();
    let mut conn = connection(&pool).await;
    let known: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query_async(&mut conn)
        .await
        .expect("SCRIPT EXISTS");
    assert_eq!(
        known,
        [true],
        "the benchmark's copy of the GCRA script differs from tollgate's: update GCRA_SCRIPT"
    );

    let quota = quota();
    let interval = (quota.period().as_micros() as u64).div_ceil(u64::from(quota.limit()));
    let bare = Arc::new(Bare {
        sha,
        keys: clients
            .iter()
            .map(|c| store.state_key(&policy, c))
            .collect(),
        args: [
            u64::from(quota.limit()),
            quota.period().as_micros() as u64,
            u64::from(quota.capacity()),
            interval,
            1,
        ],
    });
    let checked = Arc::new(Checked {
        store: store.clone(),
        policy: policy.clone(),
        clients: clients.clone(),
    });
    let layered = Arc::new(Layered::new(store.clone(), &clients));

    let timed = Arc::new(Timed(Arc::clone(&bare)));

    println!(
        "| requests in flight | bare redis-rs `EVALSHA` | `RedisStore::check` | ratio | \
         bare, in a 50 ms timeout | `RateLimitLayer` on `RedisStore` | ratio | \
         ratio to the timed bare |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (&concurrency, &decisions) in CONCURRENCY.iter().zip(&DECISIONS) {
        // One unmeasured run of each first: connections made, caches warm.
        measure(&pool, &bare, concurrency, decisions / 4).await;
        measure(&pool, &checked, concurrency, decisions / 4).await;
        measure(&pool, &timed, concurrency, decisions / 4).await;
        measure(&pool, &layered, concurrency, decisions / 4).await;
        let (mut b, mut c, mut t, mut l) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            b.push(measure(&pool, &bare, concurrency, decisions).await);
            c.push(measure(&pool, &checked, concurrency, decisions).await);
            t.push(measure(&pool, &timed, concurrency, decisions).await);
            l.push(measure(&pool, &layered, concurrency, decisions).await);
        }
        let (b, c, t, l) = (median(b), median(c), median(t), median(l));
        println!(
            "| {concurrency} | {} | {} | {:.2}× | {} | {} | {:.2}× | {:.2}× |",
            b.show(),
            c.show(),
            c.cpu_us / b.cpu_us,
            t.show(),
            l.show(),
            l.cpu_us / b.cpu_us,
            l.cpu_us / t.cpu_us
        );
    }
    println!();
    println!(
        "µs of the app's CPU per decision (median of {ROUNDS} interleaved runs), and decisions \
         per second of wall time; {} cores, redis-server {}.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        redis_version(&mut conn).await
    );
}

/// One measured run: CPU µs per decision and decisions per second.
#[derive(Clone, Copy)]
struct Figures {
    cpu_us: f64,
    per_second: f64,
}

impl Figures {
    fn show(&self) -> String {
        format!("{:.1} µs ({:.0}/s)", self.cpu_us, self.per_second)
    }
}

fn median(mut runs: Vec<Figures>) -> Figures {
    runs.sort_by(|a, b| a.cpu_us.total_cmp(&b.cpu_us));
    runs[runs.len() / 2]
}

/// Runs `decisions` decisions of `way` from `concurrency` tasks, and measures them.
async fn measure<W: Way>(
    pool: &Pool,
    way: &Arc<W>,
    concurrency: usize,
    decisions: usize,
) -> Figures {
    let next = Arc::new(AtomicUsize::new(0));
    let mut connections = Vec::new();
    for _ in 0..concurrency {
        connections.push(connection(pool).await);
    }
    let (cpu, wall) = (process_cpu(), Instant::now());
    let tasks: Vec<_> = connections
        .into_iter()
        .map(|mut conn| {
            let (way, next) = (Arc::clone(way), Arc::clone(&next));
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= decisions {
                        break;
                    }
                    way.decide(i % KEYS, &mut conn).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task ran to its end");
    }
    let (cpu, wall) = (process_cpu() - cpu, wall.elapsed());
    Figures {
        cpu_us: cpu.as_secs_f64() * 1e6 / decisions as f64,
        per_second: decisions as f64 / wall.as_secs_f64(),
    }
}

/// A multiplexed connection from the pool, as tollgate's store keeps one.
async fn connection(pool: &Pool) -> MultiplexedConnection {
    let pooled = pool.get().await.expect("a connection from the pool");
    MultiplexedConnection::clone(&pooled)
}

/// The floor: the script's `EVALSHA` by hand, with keys and arguments written before.
struct Bare {
    sha: String,
    keys: Vec<String>,
    args: [u64; 5],
}

impl Way for Bare {
    async fn decide(&self, i: usize, conn: &mut MultiplexedConnection) {
        let reply: Vec<i64> = redis::cmd("EVALSHA")
            .arg(&self.sha)
            .arg(1)
            .arg(&self.keys[i])
            .arg(&self.args[..])
            .arg("")
            .query_async(conn)
            .await
            .expect("EVALSHA");
        assert_eq!(reply[0], 1, "allowed");
    }
}

/// The floor with the layer's store timeout around it.
struct Timed(Arc<Bare>);

impl Way for Timed {
    async fn decide(&self, i: usize, conn: &mut MultiplexedConnection) {
        let decided = tokio::time::timeout(Duration::from_millis(50), self.0.decide(i, conn));
        decided.await.expect("within the timeout");
    }
}

/// tollgate's store, through the `Store` trait.
struct Checked {
    store: RedisStore,
    policy: Policy,
    clients: Vec<String>,
}

impl Way for Checked {
    async fn decide(&self, i: usize, _: &mut MultiplexedConnection) {
        let decision = self.store.check(&self.clients[i], &self.policy, 1).await;
        assert!(decision.expect("a decision").allowed);
    }
}

/// A trivial service behind tollgate's layer on the Redis store.
type Limited = tollgate::RateLimit<tower::util::ServiceFn<TrivialService>>;

struct Layered {
    service: Limited,
    keys: Vec<HeaderValue>,
}

impl Layered {
    fn new(store: RedisStore, clients: &[String]) -> Self {
        let layer = RateLimitLayer::builder()
            .name("bench")
            .quota(quota())
            .key(key::Header::new("x-api-key"))
            .headers(HeaderStyle::Ietf)
            .store(store)
            .build()
            .expect("a valid layer");
        let trivial: TrivialService = |_| std::future::ready(Ok(Response::new(Body::empty())));
        Self {
            service: layer.layer(tower::service_fn(trivial)),
            keys: clients
                .iter()
                .map(|c| HeaderValue::from_str(c).expect("a header value"))
                .collect(),
        }
    }
}

impl Way for Layered {
    async fn decide(&self, i: usize, _: &mut MultiplexedConnection) {
        let mut request = Request::new(());
        request
            .headers_mut()
            .insert("x-api-key", self.keys[i].clone());
        let response = self.service.clone().oneshot(request).await;
        assert_eq!(response.expect("infallible").status(), 200);
    }
}

/// The CPU time of this process, every thread.
fn process_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

async fn redis_version(conn: &mut MultiplexedConnection) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned()
}

/// The redis-server this benchmark uses: its own (stopped on drop), or the one given.
struct Server {
    url: String,
    child: Option<Child>,
}

impl Server {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (or set TOLLGATE_REDIS_URL)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            url: format!("redis://127.0.0.1:{port}"),
            child: Some(child),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
