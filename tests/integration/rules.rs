//! Rules over real HTTP: per-route and stacked limits, cost, tiers, shadow, skip, delay, and
//! a rules file reloaded while serving.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::routing::{get, post};
use axum::Router;
use http::Method;
use tollgate::rules::{Mode, Rule};
use tollgate::store::{MemoryStore, RedisStore};
use tollgate::{
    clock::ManualClock, key, store::Store, Algorithm, Quota, RateLimitLayer, RateLimitLayerBuilder,
    Skip,
};
use tower::{Layer, ServiceExt};

fn routes() -> Router {
    Router::new()
        .route("/", get(|| async { "home" }))
        .route("/health", get(|| async { "ok" }))
        .route("/login", post(|| async { "welcome" }))
        .route(
            "/api/items",
            get(|| async { "items" }).options(|| async { "" }),
        )
        .route("/api/export", get(|| async { "export" }))
}

async fn serve(layer: RateLimitLayer) -> SocketAddr {
    support::serve(routes().layer(layer)).await
}

struct Reply {
    status: u16,
    ratelimit: Option<String>,
    policy: Option<String>,
}

async fn send(addr: SocketAddr, method: Method, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = support::client().request(method, format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let r = request.send().await.unwrap();
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    Reply {
        status: r.status().as_u16(),
        ratelimit: header("ratelimit"),
        policy: header("ratelimit-policy"),
    }
}

async fn statuses(addr: SocketAddr, method: Method, path: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(send(addr, method.clone(), path, &[]).await.status);
    }
    out
}

#[tokio::test]
async fn routes_are_limited_separately() {
    let layer = RateLimitLayer::builder()
        .key(key::Global)
        .rule(
            Rule::new("login", Quota::per_minute(2).unwrap())
                .methods([Method::POST])
                .path("/login"),
        )
        .rule(Rule::new("api", Quota::per_minute(3).unwrap()).path("/api/*"))
        .build()
        .unwrap();
    let addr = serve(layer).await;
    assert_eq!(
        statuses(addr, Method::POST, "/login", 3).await,
        [200, 200, 429]
    );
    assert_eq!(
        statuses(addr, Method::GET, "/api/items", 4).await,
        [200, 200, 200, 429]
    );
    // No rule matches these: unlimited and without headers.
    assert_eq!(statuses(addr, Method::GET, "/", 5).await, [200; 5]);
    assert!(send(addr, Method::GET, "/", &[]).await.ratelimit.is_none());
}

/// A burst limit and a daily limit on the same route, with a clock the test moves.
fn stacked(store: impl Store) -> RateLimitLayerBuilder {
    RateLimitLayer::builder()
        .key(key::Global)
        .rule(Rule::new("burst", Quota::per_minute(2).unwrap()).path("/api/*"))
        .rule(
            Rule::new("daily", Quota::per_day(3).unwrap())
                .path("/api/*")
                .algorithm(Algorithm::FixedWindow),
        )
        .store(store)
}

async fn a_request_denied_by_one_limit_consumes_nothing_from_the_other(
    store: impl Store,
    clock: ManualClock,
) {
    let addr = serve(stacked(store).build().unwrap()).await;
    let r = send(addr, Method::GET, "/api/items", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.policy.as_deref(),
        Some("\"burst\";q=2;w=60, \"daily\";q=3;w=86400")
    );
    assert_eq!(r.ratelimit.as_deref(), Some("\"burst\";r=1;t=30"));
    assert_eq!(
        statuses(addr, Method::GET, "/api/items", 3).await,
        [200, 429, 429]
    );
    // The burst limit denied two requests; the daily limit counted only the two allowed.
    clock.advance(Duration::from_secs(60));
    let r = send(addr, Method::GET, "/api/items", &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.ratelimit.unwrap().starts_with("\"daily\";r=0;"));
    // Now the daily limit denies, and the burst limit must not count that either.
    clock.advance(Duration::from_secs(60));
    let r = send(addr, Method::GET, "/api/items", &[]).await;
    assert_eq!(r.status, 429);
    assert!(r.ratelimit.unwrap().starts_with("\"daily\";r=0;"));
}

#[tokio::test]
async fn stacked_limits_are_atomic_in_memory() {
    let clock = ManualClock::new(86_400_000_000 * 20_000 + 1);
    let store = MemoryStore::with_clock(clock.clone());
    a_request_denied_by_one_limit_consumes_nothing_from_the_other(store, clock).await;
}

#[tokio::test]
async fn stacked_limits_are_atomic_in_redis() {
    let clock = ManualClock::new(86_400_000_000 * 20_000 + 1);
    let store = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(support::unique_prefix("stacked"))
        .with_clock(clock.clone());
    a_request_denied_by_one_limit_consumes_nothing_from_the_other(store, clock).await;
}

#[tokio::test]
async fn cost_comes_from_a_header_clamped_and_checked() {
    let layer = RateLimitLayer::builder()
        .key(key::Global)
        .rule(
            Rule::new("bulk", Quota::per_minute(10).unwrap())
                .algorithm(Algorithm::FixedWindow)
                .path("/api/*")
                .cost_header("x-cost")
                .max_cost(6),
        )
        .build()
        .unwrap();
    let addr = serve(layer).await;
    async fn costing(addr: SocketAddr, c: &str) -> Reply {
        send(addr, Method::GET, "/api/items", &[("x-cost", c)]).await
    }
    let cost = |c: &'static str| costing(addr, c);
    let r = cost("3").await;
    assert_eq!(
        (r.status, r.ratelimit.unwrap().contains(";r=7;")),
        (200, true)
    );
    // 1000 is clamped to the maximum of 6: 7 - 6 = 1 left.
    let r = cost("1000").await;
    assert_eq!(
        (r.status, r.ratelimit.unwrap().contains(";r=1;")),
        (200, true)
    );
    assert_eq!(cost("2").await.status, 429);
    for bad in ["0", "-1", "abc", "1.5", ""] {
        assert_eq!(cost(bad).await.status, 400, "x-cost: {bad:?}");
    }
    // Without the header a request costs 1.
    assert_eq!(
        statuses(addr, Method::GET, "/api/items", 2).await,
        [200, 429]
    );
}

#[tokio::test]
async fn a_cost_header_is_plain_digits_and_any_large_cost_is_clamped() {
    let layer = RateLimitLayer::builder()
        .key(key::Global)
        .rule(
            Rule::new("bulk", Quota::per_minute(10).unwrap())
                .algorithm(Algorithm::FixedWindow)
                .cost_header("x-cost")
                .max_cost(4),
        )
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let client = support::client();
    let url = format!("http://{addr}/");
    for bad in ["+5", "-0", "0x3", "1e2"] {
        let r = client.get(&url).header("x-cost", bad).send().await.unwrap();
        assert_eq!(r.status(), 400, "x-cost: {bad:?}");
        assert_eq!(
            r.text().await.unwrap(),
            "Bad Request: the x-cost header must be a whole number of at least 1 \
             (costs above 4 count as 4)\n"
        );
    }
    // 2^64 - 1 and larger are clamped to max_cost, as the message says: 10 - 4 - 4 = 2 left.
    for huge in ["18446744073709551615", "123456789012345678901234567890"] {
        let r = send(addr, Method::GET, "/", &[("x-cost", huge)]).await;
        assert_eq!(r.status, 200, "x-cost: {huge}");
    }
    let r = send(addr, Method::GET, "/", &[]).await;
    assert_eq!(
        (r.status, r.ratelimit.unwrap().contains(";r=1;")),
        (200, true)
    );
}

#[tokio::test]
async fn tiers_give_paid_keys_a_larger_quota() {
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::new("api", Quota::per_minute(2).unwrap())
                .key(key::Header::new("x-api-key"))
                .quota_for(|key| {
                    key.starts_with("paid-")
                        .then(|| Quota::per_minute(5).unwrap())
                }),
        )
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let mut free = Vec::new();
    let mut paid = Vec::new();
    for _ in 0..6 {
        free.push(
            send(addr, Method::GET, "/", &[("x-api-key", "free-1")])
                .await
                .status,
        );
        paid.push(
            send(addr, Method::GET, "/", &[("x-api-key", "paid-1")])
                .await
                .status,
        );
    }
    assert_eq!(free, [200, 200, 429, 429, 429, 429]);
    assert_eq!(paid, [200, 200, 200, 200, 200, 429]);
}

/// `RateLimit-Policy` names the quota a request was decided by: its tier's, or the rule's.
#[tokio::test]
async fn a_tier_shows_its_own_quota_in_the_policy_header() {
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::new("api", Quota::per_minute(2).unwrap())
                .key(key::Header::new("x-api-key"))
                .quota_for(|key| {
                    key.starts_with("paid-")
                        .then(|| Quota::per_minute(5).unwrap())
                }),
        )
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let free = send(addr, Method::GET, "/", &[("x-api-key", "free-1")]).await;
    let paid = send(addr, Method::GET, "/", &[("x-api-key", "paid-1")]).await;
    assert_eq!(free.policy.as_deref(), Some("\"api\";q=2;w=60"));
    assert_eq!(paid.policy.as_deref(), Some("\"api\";q=5;w=60"));
    assert_eq!(paid.ratelimit.as_deref(), Some("\"api\";r=4;t=12"));
}

#[tokio::test]
async fn shadow_rules_never_block_but_report_and_count() {
    let layer = RateLimitLayer::builder()
        .key(key::Global)
        .rule(Rule::new("new-limit", Quota::per_minute(1).unwrap()).mode(Mode::Shadow))
        .build()
        .unwrap();
    let handle = layer.clone();
    let addr = serve(layer).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = send(addr, Method::GET, "/", &[]).await;
        seen.push((r.status, r.ratelimit.unwrap()));
    }
    assert_eq!(
        seen,
        [
            (200, "\"new-limit\";r=0;t=60".to_owned()),
            (200, "\"new-limit\";r=0;t=60".to_owned()),
            (200, "\"new-limit\";r=0;t=60".to_owned()),
        ]
    );
    assert_eq!(handle.control().stats().shadow_denials, 2);
}

#[tokio::test]
async fn skipped_requests_are_never_limited() {
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(1).unwrap())
        .key(key::Global)
        .skip(Skip::new().path("/health"))
        .skip(Skip::new().when(|req| req.method == Method::OPTIONS))
        .build()
        .unwrap();
    let addr = serve(layer).await;
    assert_eq!(statuses(addr, Method::GET, "/health", 4).await, [200; 4]);
    assert_eq!(
        statuses(addr, Method::OPTIONS, "/api/items", 4).await,
        [200; 4]
    );
    assert!(send(addr, Method::GET, "/health", &[])
        .await
        .ratelimit
        .is_none());
    assert_eq!(
        statuses(addr, Method::GET, "/api/items", 2).await,
        [200, 429]
    );
}

/// A rule of 2/s, burst 1, in delay mode: slots every 500 ms, for waits up to `max_delay`.
fn export_in_delay_mode(max_delay: Duration) -> Rule {
    Rule::new("export", "2/s; burst=1".parse().unwrap())
        .mode(Mode::Delay)
        .max_delay(max_delay)
}

#[tokio::test]
async fn delay_mode_queues_requests_at_a_steady_rate() {
    let layer = RateLimitLayer::builder()
        .key(key::Global)
        .rule(export_in_delay_mode(Duration::from_secs(3)).path("/api/export"))
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let started = Instant::now();
    let requests: Vec<_> = (0..5)
        .map(|_| {
            tokio::spawn(async move {
                let status = send(addr, Method::GET, "/api/export", &[]).await.status;
                (status, started.elapsed())
            })
        })
        .collect();
    let mut done = Vec::new();
    for r in requests {
        done.push(r.await.unwrap());
    }
    assert!(done.iter().all(|(status, _)| *status == 200), "{done:?}");
    let mut times: Vec<Duration> = done.iter().map(|(_, t)| *t).collect();
    times.sort();
    // Slots every 500 ms: 0, 0.5, 1, 1.5, 2 s.
    assert!(times[0] < Duration::from_millis(300), "{times:?}");
    assert!(times[4] >= Duration::from_millis(1900), "{times:?}");
    assert!(times[4] < Duration::from_millis(2600), "{times:?}");
    for pair in times.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(350), "{times:?}");
    }
}

/// A request dropped while it waits for its slot (its client hung up) gives the slot back: the
/// next request takes it, instead of queueing behind one that will never go.
async fn a_request_dropped_while_it_waits_gives_its_slot_back(store: impl Store) {
    let layer = RateLimitLayer::builder()
        .key(key::Global)
        .store(store)
        .rule(export_in_delay_mode(Duration::from_secs(3)))
        .build()
        .unwrap();
    let service = layer.layer(crate::ok_service());
    let send = || service.clone().oneshot(http::Request::new(()));
    let started = Instant::now();
    assert_eq!(send().await.unwrap().status(), 200, "slot 0, at once");
    let dropped = tokio::time::timeout(Duration::from_millis(100), send()).await;
    assert!(
        dropped.is_err(),
        "slot 1 (at 500 ms) is waited for, and given up"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(send().await.unwrap().status(), 200);
    // Slot 1 again, at 500 ms; kept, the dropped request would have pushed it to slot 2 (1 s).
    let done = started.elapsed();
    assert!(done >= Duration::from_millis(450), "done at {done:?}");
    assert!(done < Duration::from_millis(800), "done at {done:?}");
}

#[tokio::test]
async fn a_request_dropped_while_it_waits_gives_its_slot_back_in_memory() {
    a_request_dropped_while_it_waits_gives_its_slot_back(MemoryStore::new()).await;
}

#[tokio::test]
async fn a_request_dropped_while_it_waits_gives_its_slot_back_in_redis() {
    let store = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(support::unique_prefix("delay_give_back"));
    a_request_dropped_while_it_waits_gives_its_slot_back(store).await;
}

#[tokio::test]
async fn delay_mode_denies_what_would_wait_longer_than_max_delay() {
    let layer = RateLimitLayer::builder()
        .key(key::Global)
        .rule(export_in_delay_mode(Duration::from_millis(1000)))
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let started = Instant::now();
    let requests: Vec<_> = (0..5)
        .map(|_| tokio::spawn(async move { send(addr, Method::GET, "/", &[]).await.status }))
        .collect();
    let mut statuses = Vec::new();
    for r in requests {
        statuses.push(r.await.unwrap());
    }
    statuses.sort();
    // Waits of 0, 0.5 and 1 s fit in max_delay; the other two are denied at once.
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert!(started.elapsed() < Duration::from_millis(1600));
}

fn write(path: &std::path::Path, text: &str) {
    // Write then rename, as editors and config systems do, so the reader never sees half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn a_rules_file_is_reloaded_and_a_broken_one_is_ignored() {
    let dir = support::temp_dir("rules");
    let path = dir.join("rules.toml");
    let rules = |quota: &str| {
        format!(
            "[defaults]\nkey = \"global\"\n\n[[skip]]\npath = \"/health\"\n\n\
             [[rule]]\nname = \"api\"\npath = \"/api/*\"\nquota = \"{quota}\"\n"
        )
    };
    write(&path, &rules("2/min"));
    let layer = RateLimitLayer::from_rules_file(&path).unwrap();
    let handle = layer.clone();
    let addr = serve(layer).await;
    assert_eq!(
        statuses(addr, Method::GET, "/api/items", 3).await,
        [200, 200, 429]
    );
    assert_eq!(statuses(addr, Method::GET, "/health", 3).await, [200; 3]);

    // A new quota (and so a new window of state under the same name) applies within 2 s.
    write(
        &path,
        &rules("5/min; burst=5").replace("\"api\"", "\"api2\""),
    );
    let deadline = Instant::now() + Duration::from_secs(2);
    while handle.control().rule_names() != ["api2"] {
        assert!(Instant::now() < deadline, "not reloaded within 2 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        statuses(addr, Method::GET, "/api/items", 6).await,
        [200, 200, 200, 200, 200, 429]
    );

    // A broken file keeps the last good rules, and serving goes on.
    write(&path, "[[rule]]\nname = \"api\"\nquota = \"5/fortnight\"\n");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(handle.control().rule_names(), ["api2"]);
    assert_eq!(statuses(addr, Method::GET, "/api/items", 1).await, [429]);
    assert_eq!(statuses(addr, Method::GET, "/health", 1).await, [200]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn api_rule(quota: &str) -> String {
    format!("[defaults]\nkey = \"global\"\n\n[[rule]]\nname = \"api\"\npath = \"/api/*\"\nquota = \"{quota}\"\n")
}

#[tokio::test]
async fn reload_rules_applies_a_changed_file_at_once() {
    let path = support::rules_file("reload-now", api_rule("2/min"));
    let layer = RateLimitLayer::from_rules_file(&path).unwrap();
    let handle = layer.clone();
    let addr = serve(layer).await;
    assert_eq!(
        statuses(addr, Method::GET, "/api/items", 3).await,
        [200, 200, 429]
    );
    // A new name, so a fresh window of state; no waiting for the watcher.
    write(&path, &api_rule("4/min").replace("\"api\"", "\"api2\""));
    handle.control().reload_rules().unwrap();
    assert_eq!(handle.control().rule_names(), ["api2"]);
    assert_eq!(
        statuses(addr, Method::GET, "/api/items", 5).await,
        [200, 200, 200, 200, 429]
    );
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[tokio::test]
async fn a_rules_file_without_rules_is_refused_at_start_up() {
    for text in ["", "# nothing here yet\n", "[[skip]]\npath = \"/health\"\n"] {
        let path = support::rules_file("no-rules", text);
        let e = RateLimitLayer::from_rules_file(&path).unwrap_err();
        assert_eq!(e.kind(), tollgate::ConfigErrorKind::RulesFile);
        let message = e.to_string();
        assert!(
            message.contains("rules.toml: the rules file has no [[rule]]"),
            "{message}"
        );
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}

#[tokio::test]
async fn an_empty_or_non_utf8_file_at_reload_keeps_the_limits() {
    let path = support::rules_file("emptied", api_rule("2/min"));
    let layer = RateLimitLayer::from_rules_file(&path).unwrap();
    let handle = layer.clone();
    let addr = serve(layer).await;
    assert_eq!(
        statuses(addr, Method::GET, "/api/items", 3).await,
        [200, 200, 429]
    );
    for (bytes, why) in [
        (&b""[..], "has no [[rule]]"),
        (b"[[rule]]\nname = \"caf\xe9\"\n", "not UTF-8 text"),
    ] {
        std::fs::write(&path, bytes).unwrap();
        let e = handle.control().reload_rules().unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
        // Nor does the watcher apply it.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(handle.control().rule_names(), ["api"]);
        assert_eq!(
            statuses(addr, Method::GET, "/api/items", 2).await,
            [429, 429]
        );
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[tokio::test]
async fn a_get_rule_counts_head_requests_unless_head_has_its_own() {
    let layer = RateLimitLayer::builder()
        .key(key::Global)
        .rule(
            Rule::new("items", Quota::per_minute(2).unwrap())
                .methods([Method::GET])
                .path("/api/items"),
        )
        .rule(
            Rule::new("export", Quota::per_minute(2).unwrap())
                .methods([Method::GET])
                .path("/api/export"),
        )
        .rule(
            Rule::new("export-head", Quota::per_minute(3).unwrap())
                .methods([Method::HEAD])
                .path("/api/export"),
        )
        .build()
        .unwrap();
    let addr = serve(layer).await;
    // axum answers HEAD with the GET handler, so HEAD must not go around the GET limit.
    assert_eq!(
        statuses(addr, Method::HEAD, "/api/items", 2).await,
        [200, 200]
    );
    assert_eq!(statuses(addr, Method::GET, "/api/items", 1).await, [429]);
    assert_eq!(statuses(addr, Method::HEAD, "/api/items", 1).await, [429]);
    // HEAD listed on its own: HEADs count there, and GET keeps its own two.
    assert_eq!(
        statuses(addr, Method::HEAD, "/api/export", 4).await,
        [200, 200, 200, 429]
    );
    assert_eq!(
        statuses(addr, Method::GET, "/api/export", 3).await,
        [200, 200, 429]
    );
}

#[tokio::test]
async fn a_bad_rules_file_is_a_config_error_naming_the_field() {
    let dir = support::temp_dir("bad-rules");
    let path = dir.join("rules.toml");
    for (text, expected) in [
        (
            "[[rule]]\nname = \"a\"\nquota = \"5/fortnight\"\n",
            ["rules.toml:3:", "quota", "fortnight"],
        ),
        (
            "[[rule]]\nname = \"a\"\nquota = \"5/min\"\nmode = \"loud\"\n",
            ["rules.toml:4:", "mode", "enforce"],
        ),
        (
            "[[rule]]\nname = \"a\"\nquota = \"5/min\"\nspeed = 1\n",
            ["rules.toml:4:", "speed", "name"],
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let error = RateLimitLayer::from_rules_file(&path)
            .unwrap_err()
            .to_string();
        for part in expected {
            assert!(error.contains(part), "{error:?} should mention {part:?}");
        }
    }
    let missing = RateLimitLayer::from_rules_file(dir.join("absent.toml")).unwrap_err();
    assert!(missing.to_string().contains("cannot read rules file"));
    std::fs::remove_dir_all(&dir).unwrap();
}
