//! Run with `REDIS_URL=redis://127.0.0.1:6379/15 cargo bench --bench redis_memory`.
//!
//! Measures Redis memory per tracked client for each algorithm: `used_memory` before and after
//! 100,000 distinct clients make one request each (five for the sliding window log, whose
//! memory grows with the requests it remembers). It FLUSHes the database in `REDIS_URL`
//! before each algorithm: point it at a database you can empty (db 15 above).

use deadpool_redis::redis;
use tollgate::store::RedisStore;
use tollgate::{
    store::{Policy, Store},
    Algorithm, Quota,
};

const CLIENTS: usize = 100_000;
const CONCURRENCY: usize = 64;

#[tokio::main]
async fn main() {
    // No default: it empties the database, so only one named on purpose (`cargo bench` runs
    // every bench).
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!("REDIS_URL not set: skipping redis_memory (it flushes the database it is given)");
        return;
    };
    let mut conn = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| {
            eprintln!("error: cannot connect to {url}: {e}");
            std::process::exit(2);
        });
    let store = RedisStore::from_url(&url).expect("valid REDIS_URL");
    println!("| algorithm | requests per client | bytes per client |");
    println!("|---|---|---|");
    for algorithm in Algorithm::ALL {
        let requests = if algorithm == Algorithm::SlidingWindowLog {
            5
        } else {
            1
        };
        let policy =
            Policy::new("mem", Quota::per_hour(100).unwrap(), algorithm).expect("valid policy");
        let _: () = redis::cmd("FLUSHDB").query(&mut conn).expect("FLUSHDB");
        let before = used_memory(&mut conn);
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..CONCURRENCY {
            let (store, policy) = (store.clone(), policy.clone());
            tasks.spawn(async move {
                for client in (worker..CLIENTS).step_by(CONCURRENCY) {
                    // Keys shaped like real ones: an IPv4 address.
                    let key = format!(
                        "10.{}.{}.{}",
                        client >> 16,
                        (client >> 8) & 255,
                        client & 255
                    );
                    for _ in 0..requests {
                        store.check(&key, &policy, 1).await.expect("decision");
                    }
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("worker");
        }
        let after = used_memory(&mut conn);
        let per_client = (after.saturating_sub(before)) as f64 / CLIENTS as f64;
        println!("| {algorithm} | {requests} | {per_client:.0} |");
    }
    let _: () = redis::cmd("FLUSHDB").query(&mut conn).expect("FLUSHDB");
}

fn used_memory(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(conn).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO")
}
