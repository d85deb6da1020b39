//! The built `tollgate-rls`, as a deployment runs it: the reference's fixtures accepted and
//! rejected at start-up, its integration scenario over gRPC (a tonic client here, a Python
//! grpcio client too) and over HTTP, two instances on one Redis exact at the limit with one
//! script call per request, a Redis outage answered within the store timeout, and hot reload
//! of a good and a bad file.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{ask, eventually, request, run_to_exit, RedisServer, Rls, Runtime};
use tollgate::rls::proto::rate_limit_response::{rate_limit::Unit, Code};

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
        ("TOKIO_WORKER_THREADS", "0"),
    ] {
        let mut env = vec![(name, value)];
        if name == "REDIS_TYPE" {
            env.push(("REDIS_URL", "127.0.0.1:1"));
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
        &[("USE_STATSD", "false"), ("REDIS_POOL_SIZE", "10")],
    );
    let dump = support::http()
        .get(format!("http://{}/rlconfig", rls.debug))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
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
        log.contains("USE_STATSD is ignored") && log.contains("REDIS_POOL_SIZE is ignored"),
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

    // Two descriptors: once key3 is over, key2 keeps what it had (decided atomically).
    let value = format!("{}", std::process::id());
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
    assert_eq!(seen[10], (OVER, 10, 0));
    assert_eq!(seen[11], (OVER, 10, 0));

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

#[tokio::test]
async fn a_redis_outage_is_answered_ok_within_the_store_timeout_and_counting_resumes() {
    let redis = RedisServer::start();
    let runtime = Runtime::with("outage", &REFERENCE_RUNTIME);
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let rls = Rls::start(
        &runtime,
        &[("REDIS_URL", url.as_str()), ("STORE_TIMEOUT", "100ms")],
    );
    let mut client = rls.client().await;
    let key1 = |v: &str| request("basic", &[&[("key1", v)]]);
    let counted = ask(&mut client, key1("warm")).await;
    assert!(counted.statuses[0].current_limit.is_some());

    redis.pause();
    for i in 0..8 {
        let started = Instant::now();
        let r = ask(&mut client, key1("down")).await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(400),
            "answer {i} took {took:?}"
        );
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
            let r = ask(&mut client, key1("back")).await;
            r.statuses[0].current_limit.is_some()
        }
    })
    .await;
    assert!(back, "counting again once Redis is back");
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
