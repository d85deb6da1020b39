//! Run with `REDIS_URL=redis://127.0.0.1:6379/15 cargo bench --bench script_cost`.
//!
//! Redis runs scripts one at a time, so the server time a decision's script takes is the
//! limiter's ceiling. This measures each algorithm's script in Redis server time per call
//! (`INFO commandstats`, `usec_per_call` of `EVALSHA`) against the floor for any GCRA-like
//! limiter: a bare script doing `TIME`, `GET` and `SET … PX`. It FLUSHes the database in
//! `REDIS_URL` first: point it at one you can empty.

use deadpool_redis::redis;

const CALLS: usize = 100_000;
const CLIENTS: usize = 1_000;

/// What every script starts with, as `RedisStore` assembles them.
const PRELUDE: &str = include_str!("../lua/prelude.lua");

/// The least a GCRA decision can do in Redis, after the prelude: read the time, `GET`, `SET`.
const BARE: &str = "local now = now_us(ARGV[6])\n\
                    local v = redis.call('GET', KEYS[1])\n\
                    redis.call('SET', KEYS[1], int(now), 'PX', 60000)\n\
                    return {1, 0, 0, -1}";

/// Each algorithm's script, as the store runs it.
const SCRIPTS: [(&str, &str); 6] = [
    ("gcra, leaky_bucket", include_str!("../lua/gcra.lua")),
    ("token_bucket", include_str!("../lua/token_bucket.lua")),
    ("fixed_window", include_str!("../lua/fixed_window.lua")),
    (
        "fixed_window_from_first",
        include_str!("../lua/fixed_window_from_first.lua"),
    ),
    (
        "sliding_window_log",
        include_str!("../lua/sliding_window_log.lua"),
    ),
    ("sliding_window", include_str!("../lua/sliding_window.lua")),
];

fn main() {
    // No default: it empties the database, so only one named on purpose (`cargo bench` runs
    // every bench).
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!("REDIS_URL not set: skipping script_cost (it flushes the database it is given)");
        return;
    };
    let mut conn = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| {
            eprintln!("error: cannot connect to {url}: {e}");
            std::process::exit(2);
        });
    let scripts = std::iter::once(("bare TIME + GET + SET PX", BARE))
        .chain(SCRIPTS)
        .map(|(name, body)| (name, format!("{PRELUDE}\n{body}")));
    println!("| script | µs per call (Redis server time) | vs bare |");
    println!("|---|---|---|");
    let mut bare = 0.0;
    for (name, source) in scripts {
        let _: () = redis::cmd("FLUSHDB").query(&mut conn).expect("FLUSHDB");
        let script = redis::Script::new(&source);
        let _: String = script
            .prepare_invoke()
            .load(&mut conn)
            .expect("SCRIPT LOAD");
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut conn)
            .expect("RESETSTAT");
        // 100/min per client with burst 100: most calls are allowed and write.
        for i in 0..CALLS {
            let mut pipe = redis::pipe();
            pipe.cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(1)
                .arg(format!("cost:{name}:{{{}}}", i % CLIENTS))
                .arg(&[100u64, 60_000_000, 100, 600_000, 1][..])
                .arg("")
                .ignore();
            let _: () = pipe.query(&mut conn).expect("EVALSHA");
        }
        let per_call = usec_per_call(&mut conn);
        if bare == 0.0 {
            bare = per_call;
        }
        println!("| {name} | {per_call:.2} | {:.2}× |", per_call / bare);
    }
    let _: () = redis::cmd("FLUSHDB").query(&mut conn).expect("FLUSHDB");
}

fn usec_per_call(conn: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("usec_per_call=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .expect("evalsha in commandstats")
}
