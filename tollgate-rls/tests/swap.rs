//! A rolling swap from envoyproxy/ratelimit (the reference) to the built `tollgate-rls`, both
//! fleets on one Redis: tollgate-rls counts fixed-window limits in the reference's keys, with
//! its commands, so that counters a reference pod left are counted on (per unit, with and
//! without `CACHE_KEY_PREFIX`, and on the per-second Redis), and a client that runs the
//! reference's pipeline beside two tollgate-rls instances shares each limit exactly, in both
//! charging modes. `tollgate-rls check` warns about what would count apart.

mod support;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::{ask, redis_connection, request, RedisServer, Rls, Runtime};
use tollgate_rls::proto::rate_limit_response::Code;
use tollgate_test_kit::redis_client::{self, Commands};

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// The reference's units and their dividers (`src/utils/utilities.go` lines 20-39).
const UNITS: [(&str, u64); 7] = [
    ("second", 1),
    ("minute", 60),
    ("hour", 3_600),
    ("day", 86_400),
    ("week", 604_800),
    ("month", 2_592_000),
    ("year", 31_536_000),
];

/// One limit of 5 per unit, and one shared by every file under `files/` (`share_threshold`).
fn units_yaml() -> String {
    let mut yaml = String::from("domain: swap\ndescriptors:\n");
    for (unit, _) in UNITS {
        yaml.push_str(&format!(
            "  - key: unit\n    value: {unit}\n    rate_limit: {{ unit: {unit}, requests_per_unit: 5 }}\n"
        ));
    }
    yaml.push_str(
        "  - key: file\n    value: \"files/*\"\n    share_threshold: true\n    \
         rate_limit: { unit: day, requests_per_unit: 5 }\n",
    );
    yaml
}

fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// Waits for the start of a second, so that what follows happens within one.
fn start_of_a_second() -> u64 {
    let ms = unix_now().subsec_millis();
    if ms > 100 {
        std::thread::sleep(Duration::from_millis(u64::from(1_000 - ms)));
    }
    unix_now().as_secs()
}

/// The reference's key (`src/limiter/cache_key.go`): the prefix, the domain and `_`, each
/// entry's key and value each followed by `_`, then `(now / divider) * divider`.
fn reference_key(prefix: &str, entries: &[(&str, &str)], divider: u64, now: u64) -> String {
    let mut key = format!("{prefix}swap_");
    for (k, v) in entries {
        key.push_str(&format!("{k}_{v}_"));
    }
    format!("{key}{}", now / divider * divider)
}

/// Counters a reference pod left (4 of 5, seeded by hand with `SET`, in the reference's keys)
/// are counted on by `rls` for every unit and for a `share_threshold` pattern (the pattern in
/// place of the value: `cache_key.go` lines 70-79): one more is OK with 0 left, the next over
/// the limit, and each counter is 6. Per-second counters are seeded in `per_second`'s Redis
/// when there is one (`src/redis/fixed_cache_impl.go` lines 173-186). Done within one second.
async fn counted_on(rls: &Rls, main: &RedisServer, per_second: Option<&RedisServer>, prefix: &str) {
    let descriptors: Vec<Vec<(&str, &str)>> = (UNITS.iter())
        .map(|(unit, _)| vec![("unit", *unit)])
        .chain([vec![("file", "files/report.pdf")]])
        .collect();
    let keys = |now: u64| -> Vec<(String, u64)> {
        let mut keys: Vec<(String, u64)> = (UNITS.iter())
            .map(|(unit, divider)| {
                (
                    reference_key(prefix, &[("unit", unit)], *divider, now),
                    *divider,
                )
            })
            .collect();
        keys.push((
            reference_key(prefix, &[("file", "files/*")], 86_400, now),
            86_400,
        ));
        keys
    };
    let mut client = rls.client().await;
    for attempt in 0..3 {
        let now = start_of_a_second();
        let mut conn = redis_connection(&main.url());
        let mut fast = per_second.map(|r| redis_connection(&r.url()));
        for (key, divider) in keys(now) {
            let conn = match (&mut fast, divider) {
                (Some(fast), 1) => fast,
                _ => &mut conn,
            };
            let _: () = conn.set_ex(&key, 4, divider.max(2)).unwrap();
        }
        let all: Vec<&[(&str, &str)]> = descriptors.iter().map(Vec::as_slice).collect();
        let first = ask(&mut client, request("swap", &all)).await;
        let second = ask(&mut client, request("swap", &all)).await;
        if unix_now().as_secs() != now && attempt < 2 {
            continue; // a second ended meanwhile: again, in the next one
        }
        let statuses = |r: &tollgate_rls::proto::RateLimitResponse| -> Vec<(i32, u32)> {
            (r.statuses.iter())
                .map(|s| (s.code, s.limit_remaining))
                .collect()
        };
        assert_eq!(statuses(&first), vec![(OK, 0); 8], "{}", rls.stderr());
        assert_eq!(statuses(&second), vec![(OVER, 0); 8]);
        for (key, divider) in keys(now) {
            let conn = match (&mut fast, divider) {
                (Some(fast), 1) => fast,
                _ => &mut conn,
            };
            let count: u64 = conn.get(&key).unwrap();
            assert_eq!(count, 6, "{key}");
        }
        if per_second.is_some() {
            let seconds = reference_key(prefix, &[("unit", "second")], 1, now);
            let there: bool = conn.exists(&seconds).unwrap();
            assert!(!there, "{seconds} is the per-second Redis's");
        }
        return;
    }
}

#[tokio::test]
async fn counters_a_reference_pod_left_are_counted_per_unit() {
    let (main, fast) = (RedisServer::start(), RedisServer::start());
    let runtime = Runtime::new("swap-units");
    runtime.write("swap.yaml", &units_yaml());
    let url = main.url();
    let fast_url = format!("127.0.0.1:{}", fast.port);
    let plain = Rls::start(&runtime, &[("REDIS_URL", url.as_str())]);
    counted_on(&plain, &main, None, "").await;
    let prefixed = Rls::start(
        &runtime,
        &[("REDIS_URL", url.as_str()), ("CACHE_KEY_PREFIX", "rl:")],
    );
    counted_on(&prefixed, &main, None, "rl:").await;
    let per_second = Rls::start(
        &runtime,
        &[
            ("REDIS_URL", url.as_str()),
            ("CACHE_KEY_PREFIX", "ps_"),
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_URL", fast_url.as_str()),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ],
    );
    assert!(
        per_second
            .line
            .contains(", per second: redis (single, 127.0.0.1:"),
        "{}",
        per_second.line
    );
    counted_on(&per_second, &main, Some(&fast), "ps_").await;
}

const SHARED: &str = "
domain: swap
descriptors:
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: 100 }
  - key: app
    rate_limit: { unit: day, requests_per_unit: 100000 }
";

/// One request by a reference pod, as its `DoLimit` runs it (`src/redis/fixed_cache_impl.go`):
/// with `stop` (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`), a pipeline of `GET`s first
/// (lines 117-158), and a counter is then charged only if none would pass its limit or it
/// would (`getHitsAddend`, lines 44-72); then `INCRBY` + `EXPIRE` for each counter in one
/// pipeline (lines 35-38, 160-204); OK iff no count after it passes its limit
/// (`src/limiter/base_limiter.go` line 104).
fn reference_pod(url: &str, keys: &[(String, u64)], stop: bool) -> bool {
    let mut conn = redis_connection(url);
    let mut adds = vec![1u64; keys.len()];
    if stop {
        let mut pipe = redis_client::pipe();
        for (key, _) in keys {
            pipe.get(key);
        }
        let counts: Vec<Option<u64>> = pipe.query(&mut conn).unwrap();
        let over: Vec<bool> = (counts.iter().zip(keys))
            .map(|(count, (_, limit))| count.unwrap_or(0) + 1 > *limit)
            .collect();
        if over.contains(&true) {
            for (add, over) in adds.iter_mut().zip(&over) {
                *add = u64::from(*over);
            }
        }
    }
    let mut pipe = redis_client::pipe();
    for ((key, _), add) in keys.iter().zip(&adds) {
        pipe.incr(key, *add).expire(key, 86_400).ignore();
    }
    let after: Vec<u64> = pipe.query(&mut conn).unwrap();
    after
        .iter()
        .zip(keys)
        .all(|(count, (_, limit))| count <= limit)
}

/// 300 requests of `tenant` (limit 100) and `app`, in turn by a reference pod and two
/// tollgate-rls instances, at most `in_flight` at once: how many were OK, and the `app`
/// counter after.
async fn three_pods(
    url: &str,
    clients: &[tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient<
        tonic::transport::Channel,
    >],
    tenant: &str,
    in_flight: usize,
    stop: bool,
) -> (usize, u64) {
    let day = unix_now().as_secs() / 86_400 * 86_400;
    let keys = vec![
        (format!("rl:swap_tenant_{tenant}_{day}"), 100),
        (format!("rl:swap_app_all_{day}"), 100_000),
    ];
    let permits = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut tasks = Vec::new();
    for i in 0..300 {
        let permits = Arc::clone(&permits);
        let (url, keys, tenant) = (url.to_owned(), keys.clone(), tenant.to_owned());
        let mut client = clients[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire().await.unwrap();
            if i % 3 == 2 {
                let ok = tokio::task::spawn_blocking(move || reference_pod(&url, &keys, stop));
                return ok.await.unwrap();
            }
            let both = request("swap", &[&[("tenant", &tenant)], &[("app", "all")]]);
            let r = ask(&mut client, both).await;
            assert!(
                r.statuses.iter().all(|s| s.current_limit.is_some()),
                "{r:?}"
            );
            r.overall_code == OK
        }));
    }
    let mut ok = 0;
    for task in tasks {
        ok += usize::from(task.await.unwrap());
    }
    let app: u64 = redis_connection(url).get(&keys[1].0).unwrap();
    (ok, app)
}

/// A reference pod and two tollgate-rls instances on one Redis admit exactly the limit in
/// total, all at once and at 64 in flight, charging every hit (each of the 300 requests
/// charges `app`) and with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (the requests refused by
/// `tenant` mostly leave `app` alone: not under concurrency, in either fleet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_pod_and_two_instances_share_each_limit_exactly() {
    for stop in [false, true] {
        let redis = RedisServer::start();
        let runtime = Runtime::new("swap-shared");
        runtime.write("swap.yaml", SHARED);
        let url = redis.url();
        let stop_setting = if stop { "true" } else { "false" };
        let env = [
            ("REDIS_URL", url.as_str()),
            ("CACHE_KEY_PREFIX", "rl:"),
            ("STORE_TIMEOUT", "5s"),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", stop_setting),
        ];
        let (a, b) = (Rls::start(&runtime, &env), Rls::start(&runtime, &env));
        let clients = [a.client().await, b.client().await];
        let (ok, app) = three_pods(&url, &clients, "all-at-once", 300, stop).await;
        assert_eq!(ok, 100, "stop {stop}");
        let (ok, app_after) = three_pods(&url, &clients, "64-in-flight", 64, stop).await;
        assert_eq!(ok, 100, "stop {stop}");
        match stop {
            false => assert_eq!((app, app_after), (300, 600)),
            // All at once, every GET pass may run before any counter is over: as in the
            // reference, nothing is left alone then. At 64 in flight most requests come after.
            true => assert!(
                (100..=300).contains(&app) && (app + 100..app + 300).contains(&app_after),
                "{app}, {app_after}"
            ),
        }
    }
}

/// `tollgate-rls check` loads a file with tollgate's extensions (exit 0) and warns, per
/// limit, that the reference refuses the file (its `validateYamlKeys`,
/// `src/config/config_impl.go` lines 355-370) and what counts apart from it.
#[test]
fn check_warns_about_what_would_count_apart_from_the_reference() {
    let runtime = Runtime::new("swap-check");
    runtime.write("swap.yaml", SHARED);
    runtime.write(
        "edge.yaml",
        "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: second, requests_per_unit: 10, algorithm: gcra, burst: 20 }\n",
    );
    let dir = runtime.config();
    let out = Command::new(support::BIN)
        .args(["check", dir.to_str().unwrap()])
        .env_clear()
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stdout}");
    assert!(
        warnings[0].contains("edge.yaml: descriptor 'edge.tenant': algorithm: gcra, burst: 20 is tollgate's: the reference refuses this file (config error, unknown key 'algorithm'); and tollgate-rls counts this limit in its own keys"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("all 2 configuration file(s) ok\n"),
        "{stdout}"
    );
}

/// The per-second Redis down: every answer within the store timeout, as the reference's
/// plain Go error reaches Envoy (`UNKNOWN`: `src/service/ratelimit.go` lines 425-428), and counting again once it is back (one circuit breaker covers both
/// Redis).
#[tokio::test]
async fn a_per_second_redis_outage_is_answered_within_the_store_timeout() {
    let (main, fast) = (RedisServer::start(), RedisServer::start());
    let runtime = Runtime::new("swap-outage");
    runtime.write("swap.yaml", &units_yaml());
    let (url, fast_url) = (main.url(), fast.url());
    let rls = Rls::start(
        &runtime,
        &[
            ("REDIS_URL", url.as_str()),
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_URL", fast_url.as_str()),
            ("STORE_TIMEOUT", "100ms"),
        ],
    );
    let mut client = rls.client().await;
    let second = || request("swap", &[&[("unit", "second")]]);
    assert!(ask(&mut client, second()).await.statuses[0]
        .current_limit
        .is_some());
    fast.pause();
    for i in 0..8 {
        let started = std::time::Instant::now();
        let answer = client.should_rate_limit(second()).await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(400),
            "answer {i} took {took:?}"
        );
        let status = answer.expect_err("a store failure is a gRPC error");
        assert_eq!(status.code(), tonic::Code::Unknown, "answer {i}");
    }
    fast.resume();
    let back = support::eventually(Duration::from_secs(10), || {
        let mut client = client.clone();
        async move {
            match client.should_rate_limit(second()).await {
                Ok(r) => r.into_inner().statuses[0].current_limit.is_some(),
                Err(_) => false,
            }
        }
    })
    .await;
    assert!(back, "counting again once the per-second Redis is back");
}
