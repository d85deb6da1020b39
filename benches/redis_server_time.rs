//! Run with `cargo bench --bench redis_server_time` (about a minute). Prints one Markdown table.
//!
//! What a decision costs Redis itself, in each way tollgate can count on it, side by side with
//! the floor of the reference rate limit service (envoyproxy/ratelimit): a bare redis-rs client
//! sending its pipeline, `INCRBY key 1` + `EXPIRE key 60` per descriptor
//! (`src/redis/fixed_cache_impl.go` lines 35-38), on one multiplexed connection. Per decision:
//!
//! - the commands Redis ran, and their time: the sum of every command's `usec` in
//!   `INFO commandstats` (a script's commands are inside its `EVALSHA`'s time), as Redis counts
//!   the time it spends executing commands;
//! - the redis-server process's CPU (`INFO cpu`, `used_cpu_user` + `used_cpu_sys`): execution
//!   and everything around it (reading and parsing requests, writing replies, the event loop).
//!
//! Ways, each with one descriptor (the common request) and some with three:
//!
//! - `bare pipeline`: the floor above; `bare, stop when over`: the reference's
//!   `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` by hand (a pipeline of `GET`s, then the pipeline);
//! - `reference keys, …`: tollgate's engine on a `RedisStore` with plain counters
//!   (`Policy::with_plain_counter`, what tollgate-rls runs by default), charging every hit,
//!   stopping when over the limit, or refusing without consuming (`lua/plain_counter.lua`);
//! - `tollgate keys, …`: the same with tollgate's own keys and scripts (`REFERENCE_COUNTERS=false`
//!   in tollgate-rls): the fixed window, GCRA.
//!
//! [`DECISIONS`] decisions per run from [`IN_FLIGHT`] tasks on a two-worker runtime over
//! [`KEYS`] clients, every decision allowed (so every one writes); every way runs [`ROUNDS`]
//! times, interleaved, and the median is shown, with its ratio to the bare pipeline's in the
//! same round. A private redis-server on a free port (`INFO` is the whole server's), stopped at
//! the end.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_redis::redis::{self, aio::MultiplexedConnection};
use tollgate::engine::{Ask, Charging, Engine};
use tollgate::store::{Policy, RedisStore};
use tollgate::{Algorithm, Quota};
use tollgate_test_kit::RedisServer;

/// Decisions per measured run.
const DECISIONS: usize = 20_000;
/// Requests in flight.
const IN_FLIGHT: usize = 32;
/// Measured runs of each way, interleaved.
const ROUNDS: usize = 5;
/// Distinct clients, taken in turn.
const KEYS: usize = 10_000;
/// A limit no run reaches, per minute.
const LIMIT: u32 = 50_000_000;

/// One way of deciding: one request of `descriptors` descriptors for the `i`-th client.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    Bare,
    BareStop,
    Engine(Charging, Keys),
}

/// Which keys the engine counts in.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Keys {
    /// The reference's: plain counters.
    Reference,
    /// tollgate's, with this algorithm.
    Tollgate(Algorithm),
}

impl Way {
    fn name(self) -> String {
        match self {
            Way::Bare => "bare pipeline (`INCRBY` + `EXPIRE`)".into(),
            Way::BareStop => "bare, stop when over (`GET`, then `INCRBY` + `EXPIRE`)".into(),
            Way::Engine(charging, Keys::Reference) => format!("reference keys, {}", mode(charging)),
            Way::Engine(charging, Keys::Tollgate(a)) => {
                format!("tollgate keys, {a}, {}", mode(charging))
            }
        }
    }
}

fn mode(charging: Charging) -> &'static str {
    match charging {
        Charging::EveryHit => "every hit",
        Charging::StopWhenOverLimit => "stop when over",
        _ => "refused consume nothing",
    }
}

fn main() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(&server.url()));
}

/// What a way needs to decide.
struct Setup {
    conn: MultiplexedConnection,
    engine: Engine,
    plain: Policy,
    fixed: Policy,
    gcra: Policy,
    /// Per client, per descriptor: the reference's key without its window.
    clients: Vec<[String; 3]>,
}

async fn run(url: &str) {
    let client = redis::Client::open(url).expect("a Redis URL");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let quota = Quota::per_minute(LIMIT).expect("a quota");
    let fixed = Policy::new("bench", quota, Algorithm::FixedWindow).expect("a policy");
    let setup = Arc::new(Setup {
        conn,
        engine: Engine::builder()
            .store(RedisStore::from_url(url).expect("a store"))
            .store_timeout(Duration::from_secs(5))
            .build()
            .expect("an engine"),
        plain: fixed.clone().with_plain_counter().expect("a plain counter"),
        gcra: Policy::new("bench", quota, Algorithm::Gcra).expect("a policy"),
        fixed,
        clients: (0..KEYS)
            .map(|i| [0, 1, 2].map(|d| format!("bench_d{d}_client_{i}_")))
            .collect(),
    });
    let ways: Vec<(Way, usize)> = vec![
        (Way::Bare, 1),
        (Way::Engine(Charging::EveryHit, Keys::Reference), 1),
        (Way::BareStop, 1),
        (Way::Engine(Charging::StopWhenOverLimit, Keys::Reference), 1),
        (Way::Engine(Charging::AllowedOnly, Keys::Reference), 1),
        (
            Way::Engine(Charging::EveryHit, Keys::Tollgate(Algorithm::FixedWindow)),
            1,
        ),
        (
            Way::Engine(
                Charging::AllowedOnly,
                Keys::Tollgate(Algorithm::FixedWindow),
            ),
            1,
        ),
        (
            Way::Engine(Charging::EveryHit, Keys::Tollgate(Algorithm::Gcra)),
            1,
        ),
        (Way::Bare, 3),
        (Way::Engine(Charging::EveryHit, Keys::Reference), 3),
        (Way::Engine(Charging::AllowedOnly, Keys::Reference), 3),
        (
            Way::Engine(Charging::EveryHit, Keys::Tollgate(Algorithm::FixedWindow)),
            3,
        ),
    ];
    // One unmeasured run of each: connections made, scripts loaded.
    for &(way, n) in &ways {
        measure(&setup, way, n, DECISIONS / 10).await;
    }
    let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); ways.len()];
    for round in 0..ROUNDS {
        eprintln!("round {} of {ROUNDS}", round + 1);
        for (i, &(way, n)) in ways.iter().enumerate() {
            runs[i].push(measure(&setup, way, n, DECISIONS).await);
        }
    }
    println!(
        "| descriptors | way | commands per decision | Redis µs per decision (`INFO \
         commandstats`) | vs bare | redis-server CPU µs per decision (`INFO cpu`) | vs bare |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (i, &(way, n)) in ways.iter().enumerate() {
        let bare = ways
            .iter()
            .position(|&(w, m)| w == Way::Bare && m == n)
            .expect("a bare way per size");
        let ratio = |of: fn(&Figures) -> f64| {
            let mut r: Vec<f64> = (runs[i].iter().zip(&runs[bare]))
                .map(|(a, b)| of(a) / of(b))
                .collect();
            median(&mut r)
        };
        let value = |of: fn(&Figures) -> f64| {
            let mut v: Vec<f64> = runs[i].iter().map(of).collect();
            median(&mut v)
        };
        println!(
            "| {n} | {} | {:.2} | {:.2} | {:.2}× | {:.2} | {:.2}× |",
            way.name(),
            value(|f| f.commands),
            value(|f| f.usec),
            ratio(|f| f.usec),
            value(|f| f.cpu_us),
            ratio(|f| f.cpu_us),
        );
    }
    let mut conn = setup.conn.clone();
    println!();
    println!(
        "Median of {ROUNDS} interleaved runs of {DECISIONS} decisions, {IN_FLIGHT} in flight on \
         one multiplexed connection; {} cores, redis-server {}.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        info_field(&mut conn, "server", "redis_version").await
    );
}

/// One measured run, per decision.
#[derive(Clone, Copy, Debug)]
struct Figures {
    commands: f64,
    usec: f64,
    cpu_us: f64,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs `decisions` decisions of `way`, `n` descriptors each, and reads Redis's figures.
async fn measure(setup: &Arc<Setup>, way: Way, n: usize, decisions: usize) -> Figures {
    let mut conn = setup.conn.clone();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .expect("CONFIG RESETSTAT");
    let cpu = redis_cpu(&mut conn).await;
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let (setup, next) = (Arc::clone(setup), Arc::clone(&next));
            tokio::spawn(async move {
                let mut conn = setup.conn.clone();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= decisions {
                        break;
                    }
                    decide(&setup, &mut conn, way, n, i % KEYS).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task ran to its end");
    }
    let cpu = redis_cpu(&mut conn).await - cpu;
    let (calls, usec) = commandstats(&mut conn).await;
    let per = decisions as f64;
    Figures {
        commands: calls as f64 / per,
        usec: usec as f64 / per,
        cpu_us: cpu * 1e6 / per,
    }
}

/// One decision of `way` for client `i`.
async fn decide(setup: &Setup, conn: &mut MultiplexedConnection, way: Way, n: usize, i: usize) {
    let window = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60 * 60);
    let keys: Vec<String> = (setup.clients[i][..n].iter())
        .map(|k| format!("{k}{window}"))
        .collect();
    match way {
        Way::Bare | Way::BareStop => {
            if way == Way::BareStop {
                let mut pipe = redis::pipe();
                for key in &keys {
                    pipe.get(key);
                }
                let counts: Vec<Option<u64>> = pipe.query_async(conn).await.expect("GET");
                assert!(counts.iter().all(|c| c.unwrap_or(0) < u64::from(LIMIT)));
            }
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.incr(key, 1).expire(key, 60).ignore();
            }
            let counts: Vec<u64> = pipe.query_async(conn).await.expect("INCRBY + EXPIRE");
            assert!(counts.iter().all(|&c| c <= u64::from(LIMIT)));
        }
        Way::Engine(charging, keys) => {
            let policy = match keys {
                Keys::Reference => &setup.plain,
                Keys::Tollgate(Algorithm::Gcra) => &setup.gcra,
                Keys::Tollgate(_) => &setup.fixed,
            };
            let asks: Vec<Ask<'_>> = (setup.clients[i][..n].iter())
                .map(|k| Ask::new(k, policy, 1))
                .collect();
            let decided = setup.engine.decide(&asks, charging).await;
            assert!(decided.expect("decided").iter().all(|d| d.allowed));
        }
    }
}

/// Since the last `CONFIG RESETSTAT`: the commands Redis ran (a script's own included), and
/// the µs of those a client sent: a script's commands run inside its `EVALSHA` and count in
/// its time, so when scripts ran, their time is the scripts' (no way here mixes scripts and
/// plain commands).
async fn commandstats(conn: &mut MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO commandstats");
    let field = |line: &str, name: &str| -> u64 {
        (line.split([':', ',']))
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let (mut calls, mut usec, mut scripts) = (0, 0, 0);
    for line in info.lines().filter(|l| l.starts_with("cmdstat_")) {
        if line.starts_with("cmdstat_info:") || line.starts_with("cmdstat_config:") {
            continue;
        }
        calls += field(line, "calls=");
        usec += field(line, "usec=");
        if line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:") {
            scripts += field(line, "usec=");
        }
    }
    (calls, if scripts > 0 { scripts } else { usec })
}

/// The redis-server's CPU seconds so far (user + system).
async fn redis_cpu(conn: &mut MultiplexedConnection) -> f64 {
    let user: f64 = (info_field(conn, "cpu", "used_cpu_user").await)
        .parse()
        .unwrap_or(0.0);
    let system: f64 = (info_field(conn, "cpu", "used_cpu_sys").await)
        .parse()
        .unwrap_or(0.0);
    user + system
}

async fn info_field(conn: &mut MultiplexedConnection, section: &str, name: &str) -> String {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or("?")
        .trim()
        .to_owned()
}
