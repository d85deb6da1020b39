//! The built `tollgate-rls`, as a deployment runs it: the reference's fixtures accepted and
//! rejected at start-up, its integration scenario over gRPC (a tonic client here, a Python
//! grpcio client too) and over HTTP, two instances on one Redis exact at the limit with one
//! script call per request, a Redis outage answered within the store timeout, and hot reload
//! of a good and a bad file.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{ask, eventually, request, run_to_exit, RedisServer, Rls, Runtime};
use tollgate_rls::proto::rate_limit_response::{rate_limit::Unit, Code};

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

const REFERENCE_RUNTIME: [&str; 2] = [
    "runtime/current/ratelimit/config/basic.yaml",
    "runtime/current/ratelimit/config/another.yaml",
];

#[test]
fn every_file_the_reference_rejects_stops_the_start_naming_the_file() {
    let cases = [
        ("bad_unit.yaml", "invalid rate limit unit 'fortnight'"),
        ("bad_yaml.yaml", "error loading config file"),
        (
            "duplicate_key.yaml",
            "duplicate descriptor composite key 'shop.user_bob'",
        ),
        ("empty_domain.yaml", "config file cannot have empty domain"),
        ("empty_key.yaml", "descriptor has empty key"),
        (
            "misspelled_key.yaml",
            "config error, unknown key 'ratelimit'",
        ),
        (
            "misspelled_key2.yaml",
            "config error, unknown key 'requestsperunit'",
        ),
        (
            "non_map_list.yaml",
            "yaml file contains list of type other than map: x",
        ),
        ("non_string_key.yaml", "key is not of type string: 0.5"),
        (
            "replaces_empty.yaml",
            "should not have an empty replaces entry",
        ),
        (
            "replaces_self.yaml",
            "replaces should not contain name of same descriptor",
        ),
        (
            "unlimited_with_unit.yaml",
            "should not specify rate limit unit when unlimited",
        ),
        (
            "share_threshold_without_wildcard.yaml",
            "share_threshold can only be used with wildcard",
        ),
        ("float_leaf.yaml", "error checking config"),
        ("bad_algorithm.yaml", "unknown algorithm \"leaky_window\""),
        ("burst_on_window.yaml", "burst is not used by fixed_window"),
    ];
    for (file, why) in cases {
        let runtime = Runtime::with(&format!("bad-{file}"), &[&format!("fixtures/{file}")]);
        let (status, stderr) = run_to_exit(&runtime.root, &[]);
        assert_eq!(status.code(), Some(1), "{file}: {stderr}");
        let named = format!("{}: ", runtime.config().join(file).display());
        assert!(
            stderr.contains(&named) && stderr.contains(why),
            "{file}: {stderr}"
        );
    }
    // A domain in two files, unless merging is asked for.
    let runtime = Runtime::with(
        "bad-merge",
        &["fixtures/merge_a.yaml", "fixtures/merge_b.yaml"],
    );
    let (status, stderr) = run_to_exit(&runtime.root, &[]);
    assert_eq!(status.code(), Some(1));
    assert!(
        stderr.contains("merge_b.yaml: duplicate domain 'merged' in config file"),
        "{stderr}"
    );
    let merged = Rls::start(&runtime, &[("MERGE_DOMAIN_CONFIG", "true")]);
    assert!(merged.stop().success());
}

#[test]
fn bad_settings_stop_the_start_naming_the_variable() {
    let runtime = Runtime::with("bad-settings", &REFERENCE_RUNTIME);
    for (name, value) in [
        ("SHADOW_MODE", "maybe"),
        ("GRPC_PORT", "eighty"),
        ("ON_STORE_ERROR", "panic"),
        ("REDIS_TYPE", "ring"),
        ("LOG_LEVEL", "chatty"),
        ("STATS_MAX_SERIES", "many"),
        ("NEAR_LIMIT_RATIO", "near"),
        ("PROMETHEUS_PATH", "metrics"),
        ("TOKIO_WORKER_THREADS", "0"),
    ] {
        let mut env = vec![(name, value)];
        if name == "REDIS_TYPE" {
            env.push(("REDIS_URL", "127.0.0.1:1"));
        }
        if name == "PROMETHEUS_PATH" {
            env.extend([("USE_PROMETHEUS", "true"), ("USE_STATSD", "false")]);
        }
        let (status, stderr) = run_to_exit(&runtime.root, &env);
        assert_eq!(status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(&format!("{name}=")), "{name}: {stderr}");
    }
}

#[tokio::test]
async fn the_good_fixtures_load_and_rlconfig_lists_them() {
    let runtime = Runtime::with(
        "good",
        &[
            "fixtures/nested.yaml",
            "fixtures/wildcard.yaml",
            "fixtures/extensions.yaml",
        ],
    );
    let rls = Rls::start(
        &runtime,
        &[
            ("PROMETHEUS_MAPPER_YAML", "/etc/mapper.yaml"),
            ("REDIS_PIPELINE_WINDOW", "0"),
        ],
    );
    let dump = support::get_text(format!("http://{}/rlconfig", rls.debug)).await;
    for line in [
        "shop.user_vip: unit=MINUTE requests_per_unit=30, shadow_mode: false, quota_mode: false\n",
        "files.prefix_img*: unit=MINUTE requests_per_unit=20, shadow_mode: false, quota_mode: false\n",
        "ext.sliding: unit=MINUTE requests_per_unit=100, shadow_mode: false, quota_mode: false, algorithm: sliding_window\n",
    ] {
        assert!(dump.contains(line), "{line} in {dump}");
    }
    // Settings of the reference that mean nothing here are logged once as ignored.
    let log = rls.stderr();
    assert!(
        log.contains("PROMETHEUS_MAPPER_YAML is ignored")
            && log.contains("REDIS_PIPELINE_WINDOW is ignored"),
        "{log}"
    );
}

#[tokio::test]
async fn the_references_scenario_over_grpc_and_http() {
    let runtime = Runtime::with("scenario", &REFERENCE_RUNTIME);
    let rls = Rls::start(&runtime, &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")]);
    let mut client = rls.client().await;

    let r = ask(&mut client, request("foo", &[&[("hello", "world")]])).await;
    assert_eq!(r.overall_code, OK);
    assert!(r.statuses[0].current_limit.is_none() && r.response_headers_to_add.is_empty());

    let r = ask(&mut client, request("basic", &[&[("key1", "foo")]])).await;
    let s = &r.statuses[0];
    assert_eq!((r.overall_code, s.limit_remaining), (OK, 49));
    let limit = s.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (50, Unit::Second as i32)
    );

    // Two descriptors: key3 is over after 10, and key2 is charged all the same; with
    // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT it keeps 10 (envoyproxy/ratelimit
    // test/integration/integration_test.go lines 688-699).
    let stop = Rls::start(
        &runtime,
        &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
    );
    let mut stop_client = stop.client().await;
    let value = format!("{}", std::process::id());
    let mut stopped = Vec::new();
    for _ in 0..12 {
        let pair = request("another", &[&[("key2", &value)], &[("key3", &value)]]);
        let r = ask(&mut stop_client, pair).await;
        stopped.push((r.overall_code, r.statuses[0].limit_remaining));
    }
    assert_eq!(stopped[9..], [(OK, 10), (OVER, 10), (OVER, 10)]);
    let mut seen = Vec::new();
    for _ in 0..12 {
        let r = ask(
            &mut client,
            request("another", &[&[("key2", &value)], &[("key3", &value)]]),
        )
        .await;
        seen.push((
            r.overall_code,
            r.statuses[0].limit_remaining,
            r.statuses[1].limit_remaining,
        ));
        let headers: Vec<_> = r
            .response_headers_to_add
            .iter()
            .map(|h| h.key.as_str())
            .collect();
        assert_eq!(
            headers,
            ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"]
        );
    }
    assert_eq!(seen[9], (OK, 10, 0));
    assert_eq!(seen[10], (OVER, 9, 0));
    assert_eq!(seen[11], (OVER, 8, 0));

    // The same over HTTP: POST /json, health, metrics.
    let http = support::http();
    let json = |body: &'static str| {
        let http = http.clone();
        let url = format!("http://{}/json", rls.http);
        async move {
            let r = http.post(url).body(body).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let body = r#"{"domain": "basic", "descriptors": [{"entries": [{"key": "one_per_minute", "value": "j"}]}]}"#;
    let (status, first) = json(body).await;
    assert_eq!(status, 200, "{first}");
    assert!(
        first.starts_with(
            r#"{"overallCode":"OK","responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"1"}"#
        ),
        "{first}"
    );
    let (status, second) = json(body).await;
    assert_eq!(status, 429);
    assert!(
        second.contains(
            r#""code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":1,"unit":"MINUTE"}"#
        ),
        "{second}"
    );
    assert_eq!(json("{not json").await.0, 400);
    assert_eq!(
        json(r#"{"domain": "", "descriptors": [{"entries": []}]}"#)
            .await
            .0,
        400
    );

    let health = http
        .get(format!("http://{}/healthcheck", rls.http))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (health.status().as_u16(), health.text().await.unwrap()),
        (200, "OK".to_owned())
    );
    let metrics = http
        .get(format!("http://{}/metrics", rls.http))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .contains(r#"ratelimit_service_rate_limit_over_limit{domain="another",key1="key3"} 2"#),
        "{metrics}"
    );
    assert!(rls.stop().success(), "SIGTERM stops it cleanly");
}

#[test]
fn a_python_grpcio_client_gets_the_references_answers() {
    let runtime = Runtime::with("python", &REFERENCE_RUNTIME);
    let rls = Rls::start(&runtime, &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/envoy_client.py");
    let out = Command::new("python3")
        .args([script, &rls.grpc.to_string()])
        .output()
        .expect("python3 must be installed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'grpc'"),
        "the Python client needs grpcio: pip install grpcio (scripts/test.sh does)"
    );
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
}

const SHARED: &str = "
domain: shared
descriptors:
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: 40 }
  - key: request_id
    rate_limit: { unit: day, requests_per_unit: 1000 }
";

#[tokio::test]
async fn two_instances_on_one_redis_admit_exactly_the_limit_with_one_script_call_each() {
    let redis = RedisServer::start();
    let runtime = Runtime::new("shared");
    runtime.write("shared.yaml", SHARED);
    // The reference's form of the address: host:port.
    let url = format!("127.0.0.1:{}", redis.port);
    let env = [
        ("REDIS_URL", url.as_str()),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("STORE_TIMEOUT", "5s"),
    ];
    let a = Rls::start(&runtime, &env);
    let b = Rls::start(&runtime, &env);
    let mut clients = [a.client().await, b.client().await];
    // Each instance loads its script once (NOSCRIPT, then the script): not part of the count.
    for client in &mut clients {
        let warm_up = request(
            "shared",
            &[&[("request_id", "w1")], &[("request_id", "w2")]],
        );
        let r = ask(client, warm_up).await;
        assert!(r.statuses[0].current_limit.is_some());
    }
    support::redis_cli(redis.port, &["CONFIG", "RESETSTAT"]);
    let requests = 120;
    let mut tasks = Vec::new();
    for i in 0..requests {
        let mut client = clients[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            let id = i.to_string();
            ask(
                &mut client,
                request("shared", &[&[("tenant", "t1")], &[("request_id", &id)]]),
            )
            .await
        }));
    }
    let mut ok = 0;
    for task in tasks {
        let r = task.await.unwrap();
        assert!(
            r.statuses.iter().all(|s| s.current_limit.is_some()),
            "decided: {r:?}"
        );
        ok += usize::from(r.overall_code == OK);
    }
    assert_eq!(ok, 40, "exactly the limit across both instances");
    // One script call per request, whatever the number of descriptors (plus, at most, one
    // load per instance the first time).
    let mut conn = support::redis_connection(&redis.url());
    let mut calls = |command: &str| support::command_calls(&mut conn, command);
    let scripts = calls("evalsha") + calls("eval");
    assert!(
        (requests as u64..=requests as u64 + 4).contains(&scripts),
        "{scripts} script calls"
    );
    // None of the reference's per-descriptor commands (INFO counts the script's own GET and
    // SET too, so those are not asserted).
    for other in ["incrby", "mget", "expire", "pexpire"] {
        assert_eq!(calls(other), 0, "{other}");
    }
}

/// A Redis outage, as the reference answers it by default: a gRPC error for every decision
/// (envoyproxy/ratelimit `src/service/ratelimit.go` lines 415-443 return the Redis error as
/// the call's error), so Envoy's `failure_mode_deny` decides; within the store timeout, before
/// and after the breaker opens. With `ON_STORE_ERROR=open`, OK without numbers.
#[tokio::test]
async fn a_redis_outage_is_answered_within_the_store_timeout_and_counting_resumes() {
    let redis = RedisServer::start();
    let runtime = Runtime::with("outage", &REFERENCE_RUNTIME);
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let reference = Rls::start(
        &runtime,
        &[("REDIS_URL", url.as_str()), ("STORE_TIMEOUT", "100ms")],
    );
    let open = Rls::start(
        &runtime,
        &[
            ("REDIS_URL", url.as_str()),
            ("STORE_TIMEOUT", "100ms"),
            ("ON_STORE_ERROR", "open"),
        ],
    );
    let (mut client, mut open_client) = (reference.client().await, open.client().await);
    let key1 = |v: &str| request("basic", &[&[("key1", v)]]);
    let counted = ask(&mut client, key1("warm")).await;
    assert!(counted.statuses[0].current_limit.is_some());

    redis.pause();
    for i in 0..8 {
        let started = Instant::now();
        let answer = client.should_rate_limit(key1("down")).await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(400),
            "answer {i} took {took:?}"
        );
        let status = answer.expect_err("a store failure is a gRPC error");
        assert_eq!(status.code(), tonic::Code::Unknown, "answer {i}");

        let started = Instant::now();
        let r = ask(&mut open_client, key1("down")).await;
        assert!(started.elapsed() < Duration::from_millis(400), "open {i}");
        assert_eq!(r.overall_code, OK, "fail open");
        assert!(
            r.statuses[0].current_limit.is_none(),
            "no numbers it does not know"
        );
    }
    redis.resume();
    // The breaker probes again within seconds; answers count again.
    let back = eventually(Duration::from_secs(10), || {
        let mut client = client.clone();
        async move {
            match client.should_rate_limit(key1("back")).await {
                Ok(r) => r.into_inner().statuses[0].current_limit.is_some(),
                Err(_) => false,
            }
        }
    })
    .await;
    assert!(back, "counting again once Redis is back");
}

/// Clients that give up while Redis hangs (SIGSTOP) cancel their calls mid-decision, more of
/// them than the pool has connections; the calls given up count as failures, so the breaker
/// opens and the rest are answered at once with an error. Once Redis answers again, nothing
/// the cancelled calls held is left behind (a connection, a lease, a cached denial): the
/// breaker closes and a new client is decided exactly, each answer at once.
#[tokio::test]
async fn calls_cancelled_while_redis_hangs_leave_nothing_behind() {
    let redis = RedisServer::start();
    let runtime = Runtime::with("cancelled", &REFERENCE_RUNTIME);
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let rls = Rls::start(
        &runtime,
        &[
            ("REDIS_URL", url.as_str()),
            ("REDIS_POOL_SIZE", "4"),
            ("STORE_TIMEOUT", "2s"),
        ],
    );
    let mut client = rls.client().await;
    let per_minute = |v: &str| request("basic", &[&[("one_per_minute", v)]]);
    assert_eq!(ask(&mut client, per_minute("warm")).await.overall_code, OK);

    redis.pause();
    let (mut cancelled, mut refused) = (0, 0);
    for i in 0..16 {
        let mut client = client.clone();
        let call = client.should_rate_limit(per_minute(&format!("hung{i}")));
        match tokio::time::timeout(Duration::from_millis(100), call).await {
            Err(_) => cancelled += 1,
            Ok(Err(status)) if status.code() == tonic::Code::Unknown => refused += 1,
            Ok(other) => panic!("call {i} while Redis hangs: {other:?}"),
        }
    }
    assert!(
        cancelled >= 4,
        "the first calls wait until their clients give up: {cancelled}"
    );
    assert_eq!(cancelled + refused, 16);
    redis.resume();

    // The breaker lets a probe through within seconds; it is the new client's first request
    // answered, and the only one allowed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        match client.should_rate_limit(per_minute("after")).await {
            Ok(answer) => break answer.into_inner().overall_code,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(status) => panic!("not answering once Redis is back: {status:?}"),
        }
    };
    assert_eq!(first, OK, "the new client's first answer");
    for n in [2, 3] {
        let started = Instant::now();
        let answer = ask(&mut client, per_minute("after")).await;
        let took = started.elapsed();
        assert_eq!(answer.overall_code, OVER, "request {n} after: one a minute");
        assert!(
            took < Duration::from_millis(500),
            "request {n} after took {took:?}"
        );
    }
}

#[tokio::test]
async fn a_good_change_is_applied_and_a_bad_one_logged_while_the_last_good_serves() {
    let runtime = Runtime::with("reload", &REFERENCE_RUNTIME);
    let rls = Rls::start(&runtime, &[]);
    let mut client = rls.client().await;
    let r = ask(&mut client, request("reload", &[&[("block", "foo")]])).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].current_limit.is_none()),
        (OK, true)
    );

    runtime.copy("runtime/current/ratelimit/reload.yaml");
    let limited = |entries: &'static [(&'static str, &'static str)], code: i32| {
        let client = client.clone();
        move || {
            let mut client = client.clone();
            async move {
                let r = ask(&mut client, request("reload", &[entries])).await;
                r.overall_code == code && r.statuses[0].current_limit.is_some()
            }
        }
    };
    assert!(
        eventually(Duration::from_secs(5), limited(&[("key1", "foo")], OK)).await,
        "reloaded"
    );
    let r = ask(&mut client, request("reload", &[&[("key1", "bar")]])).await;
    assert_eq!(r.statuses[0].limit_remaining, 49);
    assert_eq!(
        ask(&mut client, request("reload", &[&[("block", "x")]]))
            .await
            .overall_code,
        OVER
    );

    runtime.write("broken.yaml", "domain: broken\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n");
    let logged = eventually(Duration::from_secs(5), || {
        let log = rls.stderr();
        async move { log.contains("broken.yaml: invalid rate limit unit 'fortnight'") }
    })
    .await;
    assert!(logged, "{}", rls.stderr());
    // The last good configuration still serves.
    assert_eq!(
        ask(&mut client, request("reload", &[&[("block", "x")]]))
            .await
            .overall_code,
        OVER
    );

    runtime.remove("broken.yaml");
    runtime.remove("reload.yaml");
    let gone = eventually(Duration::from_secs(5), || {
        let mut client = client.clone();
        async move {
            let r = ask(&mut client, request("reload", &[&[("block", "x")]])).await;
            r.overall_code == OK && r.statuses[0].current_limit.is_none()
        }
    })
    .await;
    assert!(gone, "removing a file is a change too");
}

/// The `reload` domain's `key1` is limited: the reload test's file has been applied.
async fn reload_applied(rls: &Rls) -> bool {
    let client = rls.client().await;
    eventually(Duration::from_secs(5), || {
        let mut client = client.clone();
        async move {
            let r = ask(&mut client, request("reload", &[&[("key1", "x")]])).await;
            r.statuses[0].current_limit.is_some()
        }
    })
    .await
}

async fn metric(rls: &Rls, name: &str) -> String {
    let metrics = support::get_text(format!("http://{}/metrics", rls.http)).await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or("absent")
        .to_owned()
}

#[tokio::test]
async fn a_dangling_hidden_symlink_and_a_symlink_loop_neither_stop_nor_explode_the_read() {
    let runtime = Runtime::with("links", &REFERENCE_RUNTIME);
    let lock = runtime.config().join(".#edge.yaml");
    std::os::unix::fs::symlink("user@host.4242:1700000000", &lock).unwrap();
    let lp = runtime.config().join("loop");
    std::os::unix::fs::symlink(".", &lp).unwrap();
    let rls = Rls::start(&runtime, &[]);
    let mut client = rls.client().await;
    let r = ask(&mut client, request("basic", &[&[("key1", "foo")]])).await;
    assert_eq!(r.statuses[0].limit_remaining, 49, "{}", rls.stderr());

    runtime.copy("runtime/current/ratelimit/reload.yaml");
    assert!(reload_applied(&rls).await, "{}", rls.stderr());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let log = rls.stderr();
    let skipped = |path: &std::path::Path| format!("skipped {}: ", path.display());
    assert_eq!(log.matches(&skipped(&lock)).count(), 1, "{log}");
    assert_eq!(log.matches(&skipped(&lp)).count(), 1, "{log}");
    assert!(log.contains("a symlink that cannot be followed"), "{log}");
    assert!(log.contains("it leads back to a directory already read (a symlink loop)"));
    assert_eq!(
        metric(&rls, "ratelimit_service_config_load_error").await,
        "absent"
    );
}

#[tokio::test]
async fn a_named_pipe_in_the_directory_does_not_hang_the_watcher() {
    let runtime = Runtime::with("fifo", &REFERENCE_RUNTIME);
    let rls = Rls::start(&runtime, &[]);
    let pipe = runtime.config().join("pipe.yaml");
    let made = Command::new("mkfifo").arg(&pipe).status().unwrap();
    assert!(made.success());
    // Let the watcher meet it before the good change.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    runtime.copy("runtime/current/ratelimit/reload.yaml");
    assert!(reload_applied(&rls).await, "{}", rls.stderr());
    let log = rls.stderr();
    assert_eq!(
        log.matches(&format!(
            "skipped {}: not a regular file (a pipe, a socket or a device)",
            pipe.display()
        ))
        .count(),
        1,
        "{log}"
    );
}

#[tokio::test]
async fn a_file_over_the_cap_and_a_bad_file_are_each_logged_once_and_counted() {
    let runtime = Runtime::with("cap", &REFERENCE_RUNTIME);
    runtime.copy("runtime/current/ratelimit/reload.yaml");
    let rls = Rls::start(&runtime, &[]);
    assert!(reload_applied(&rls).await);
    let mut client = rls.client().await;

    // 4 MiB and one byte, sparse.
    let big = runtime.config().join("big.yaml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(4 * 1024 * 1024 + 1)
        .unwrap();
    let refused = format!(
        "cannot read configuration file {}: it is larger than the limit of 4194304 bytes (4 MiB \
         per file); a configuration file is a few kilobytes; keeping the configuration loaded \
         before",
        big.display()
    );
    let logged = eventually(Duration::from_secs(5), || {
        let found = rls.stderr().contains(&refused);
        async move { found }
    })
    .await;
    assert!(logged, "{}", rls.stderr());
    // Looked at four times more, still one line and one count.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let log = rls.stderr();
    let line = log.lines().find(|l| l.contains(&refused)).unwrap();
    assert!(line.contains("WARN"), "{line}");
    assert_eq!(log.matches(&refused).count(), 1, "{log}");
    assert_eq!(
        metric(&rls, "ratelimit_service_config_load_error").await,
        "1"
    );
    // The last good configuration serves.
    let r = ask(&mut client, request("reload", &[&[("block", "x")]])).await;
    assert_eq!(r.overall_code, OVER);

    // A different failure: a file that does not load.
    std::fs::remove_file(&big).unwrap();
    runtime.write("broken.yaml", "domain: broken\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n");
    let broken =
        "broken.yaml: invalid rate limit unit 'fortnight'; keeping the configuration loaded before";
    let logged = eventually(Duration::from_secs(5), || {
        let found = rls.stderr().contains(broken);
        async move { found }
    })
    .await;
    assert!(logged, "{}", rls.stderr());
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let log = rls.stderr();
    assert_eq!(log.matches(broken).count(), 1, "{log}");
    assert!(log
        .lines()
        .find(|l| l.contains(broken))
        .unwrap()
        .contains("WARN"));
    assert_eq!(
        metric(&rls, "ratelimit_service_config_load_error").await,
        "2"
    );
    let r = ask(&mut client, request("reload", &[&[("block", "x")]])).await;
    assert_eq!(r.overall_code, OVER);
}

/// Runs `tollgate-rls check ARGS…`: its exit code, stdout and stderr.
fn check(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(support::BIN)
        .arg("check")
        .args(args)
        .env_clear()
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The reference's `src/config_check_cmd/main.go`: loads a directory's files as the server
/// does, exits 0 ("all rate limit configs ok") or 1 naming the bad file; tollgate-rls names
/// every bad file, not only the first.
#[test]
fn check_validates_a_directory_for_ci_naming_every_bad_file() {
    let runtime = Runtime::with("check", &REFERENCE_RUNTIME);
    let dir = runtime.config();
    let dir_arg = dir.to_str().unwrap();
    let (code, out, err) = check(&[dir_arg]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.ends_with("all 2 configuration file(s) ok\n"), "{out}");

    // Three bad files and a skipped lock link, all reported; the good ones stay good.
    runtime.write("bad_unit.yaml", "domain: u\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n");
    runtime.write("basic_again.yaml", "domain: basic\n");
    std::fs::write(dir.join("latin1.yaml"), b"domain: caf\xe9\n").unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join(".#basic.yaml")).unwrap();
    let (code, out, err) = check(&[dir_arg]);
    assert_eq!(code, Some(1), "{out}{err}");
    let name = |file: &str| dir.join(file).display().to_string();
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            format!(
                "tollgate-rls check: {}: invalid rate limit unit 'fortnight'",
                name("bad_unit.yaml")
            ),
            format!(
                "tollgate-rls check: {}: duplicate domain 'basic' in config file",
                name("basic_again.yaml")
            ),
            format!(
                "tollgate-rls check: {}: the file is not UTF-8 text",
                name("latin1.yaml")
            ),
        ],
        "{err}"
    );
    assert!(
        out.contains(&format!(
            "warning: skipped {}: a symlink that cannot be followed",
            name(".#basic.yaml")
        )),
        "{out}"
    );
    assert!(
        out.ends_with("3 problem(s) in 5 configuration file(s)\n"),
        "{out}"
    );

    // The reference's flags: a domain in two files is merged when asked.
    runtime.remove("bad_unit.yaml");
    runtime.remove("latin1.yaml");
    assert_eq!(check(&[dir_arg]).0, Some(1));
    let (code, out, err) = check(&["-config_dir", dir_arg, "-merge_domain_configs"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(check(&["--merge-domains", dir_arg]).0, Some(0));

    // No directory, or one that is not there.
    let (code, _, err) = check(&[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("usage: tollgate-rls check"), "{err}");
    let (code, _, err) = check(&["/nonexistent/tollgate"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("cannot read the configuration directory /nonexistent/tollgate"),
        "{err}"
    );
}

/// A request of `count` descriptors `key1=<i>` in the domain `basic`, encoded.
fn huge_request(count: usize) -> Vec<u8> {
    let descriptors = (0..count)
        .map(|i| support::descriptor(&[("key1", &i.to_string())]))
        .collect();
    let request = tollgate_rls::proto::RateLimitRequest {
        domain: "basic".into(),
        descriptors,
        hits_addend: 0,
    };
    prost::Message::encode_to_vec(&request)
}

/// A gRPC codec that sends a message encoded beforehand and reads none back: the time of a
/// call is then the server's and the network's, not the (unoptimized) test's encoding.
#[derive(Debug, Clone, Copy)]
struct Encoded;

impl tonic::codec::Codec for Encoded {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = Encoded;
    type Decoder = Encoded;

    fn encoder(&mut self) -> Encoded {
        Encoded
    }

    fn decoder(&mut self) -> Encoded {
        Encoded
    }
}

impl tonic::codec::Encoder for Encoded {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Encoded {
    type Item = ();
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<()>, tonic::Status> {
        let all = bytes::Buf::remaining(src);
        bytes::Buf::advance(src, all);
        Ok(Some(()))
    }
}

/// Calls `ShouldRateLimit` with a message encoded beforehand.
async fn call_encoded(
    channel: tonic::transport::Channel,
    message: Vec<u8>,
) -> Result<(), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    grpc.unary(tonic::Request::new(message), path, Encoded)
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_request_is_refused_at_once_while_health_and_decisions_go_on() {
    let runtime = Runtime::with("huge", &REFERENCE_RUNTIME);
    let rls = Rls::start(&runtime, &[]);
    let http = support::http();
    let health = format!("http://{}/healthcheck", rls.http);
    let mut ordinary = rls.client().await;
    ask(&mut ordinary, request("basic", &[&[("key1", "warm")]])).await;

    // About 3.4 MB: refused from its length (over the library's 256 KiB, under tonic's own
    // 4 MiB default).
    let huge = huge_request(200_000);
    assert!(
        (3 << 20..4 << 20).contains(&huge.len()),
        "{} bytes",
        huge.len()
    );
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", rls.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let big = tokio::spawn(async move {
        let answer =
            tokio::time::timeout(Duration::from_secs(5), call_encoded(channel, huge)).await;
        (answer, started.elapsed())
    });
    // While it is in flight (and a few times more), health and an ordinary decision answer.
    let within = Duration::from_millis(200);
    let mut probes = 0;
    while !big.is_finished() || probes < 3 {
        probes += 1;
        let t = Instant::now();
        let ok = tokio::time::timeout(Duration::from_secs(2), http.get(&health).send()).await;
        let took = t.elapsed();
        assert_eq!(
            ok.ok().and_then(Result::ok).map(|r| r.status().as_u16()),
            Some(200)
        );
        assert!(took < within, "healthcheck took {took:?} (probe {probes})");
        let t = Instant::now();
        let value = format!("ordinary-{probes}");
        let decision = request("basic", &[&[("key1", &value)]]);
        let answer =
            tokio::time::timeout(Duration::from_secs(2), ordinary.should_rate_limit(decision))
                .await;
        let took = t.elapsed();
        let answer = answer.expect("an ordinary decision").unwrap().into_inner();
        assert_eq!(answer.overall_code, OK);
        assert!(
            took < within,
            "an ordinary decision took {took:?} (probe {probes})"
        );
    }
    let (answer, took) = big.await.unwrap();
    let status = answer.expect("answered").unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(
        status.message().ends_with("the limit is: 262144 bytes"),
        "{status:?}"
    );
    assert!(took < Duration::from_secs(1), "answered in {took:?}");
}

#[tokio::test]
async fn a_json_body_of_45000_descriptors_is_refused_at_once() {
    let runtime = Runtime::with("huge-json", &REFERENCE_RUNTIME);
    let rls = Rls::start(&runtime, &[]);
    // Distinct values, about 2 MB: under the HTTP server's 2 MiB limit on a body.
    let descriptors: Vec<String> = (0..45_000)
        .map(|i| format!(r#"{{"entries":[{{"key":"key1","value":"{i}"}}]}}"#))
        .collect();
    let body = format!(
        r#"{{"domain":"basic","descriptors":[{}]}}"#,
        descriptors.join(",")
    );
    let body_len = body.len();
    assert!(
        body_len < 2 << 20,
        "{body_len} bytes: under the HTTP server's limit"
    );
    let started = Instant::now();
    let answer = support::http()
        .post(format!("http://{}/json", rls.http))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap();
    let took = started.elapsed();
    let start: String = text.chars().take(100).collect();
    let expected = format!(
        "Bad Request: bytes in the request: {}, over the limit of 262144\n",
        body_len
    );
    assert_eq!((status, start), (400, expected));
    assert!(took < Duration::from_secs(1), "answered in {took:?}");
}

/// A configuration file that does not load at start. The reference serves anyway: its
/// `src/provider/file_provider.go` (`sendEvent`, line 48) recovers the load's panic into an
/// error event, and `src/service/ratelimit.go` (`SetConfig`, line 59) counts
/// `config_load_error` (line 67) and keeps no configuration, so every request is answered
/// "no rate limit configuration loaded" (line 120) until the files load; waiting for that first
/// event or not (`FORCE_START_WITHOUT_INITIAL_CONFIG`, line 467) changes nothing for files.
/// tollgate-rls exits 1 instead (a broken file stops a rollout), and serves as the reference
/// does with `FORCE_START_WITHOUT_INITIAL_CONFIG=true`.
#[tokio::test]
async fn force_start_serves_errors_until_the_files_load() {
    let runtime = Runtime::new("force-start");
    let broken = "domain: late\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n";
    runtime.write("late.yaml", broken);
    let (status, stderr) = run_to_exit(&runtime.root, &[]);
    assert_eq!(status.code(), Some(1), "{stderr}");

    let rls = Rls::start(&runtime, &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")]);
    let mut client = rls.client().await;
    let refused = client
        .should_rate_limit(request("late", &[&[("k", "v")]]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unknown);
    assert_eq!(refused.message(), "no rate limit configuration loaded");
    let metrics = support::get_text(format!("http://{}/metrics", rls.http)).await;
    assert!(
        metrics.contains("\nratelimit_service_config_load_error 1\n"),
        "{metrics}"
    );
    assert!(rls.stderr().contains("fortnight"), "{}", rls.stderr());

    // Fixed: within the watcher's look, the limit holds (1 per minute).
    runtime.write("late.yaml", &broken.replace("fortnight", "minute"));
    let loaded = eventually(Duration::from_secs(10), || {
        let mut client = client.clone();
        async move {
            client
                .should_rate_limit(request("late", &[&[("k", "v")]]))
                .await
                .is_ok()
        }
    })
    .await;
    assert!(loaded, "{}", rls.stderr());
    let again = ask(&mut client, request("late", &[&[("k", "v")]])).await;
    assert_eq!(again.overall_code, Code::OverLimit as i32);
}
