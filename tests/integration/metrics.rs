//! Metrics over real HTTP: the values a Prometheus exporter renders after a known sequence
//! of requests, on the memory store and on a real redis-server that goes away.

use crate::support;

use std::future::Future;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tollgate::rules::{Mode, Rule};
use tollgate::store::{OnStoreError, RedisStore, StoreFailure};
use tollgate::{key, Quota, RateLimitLayer, Skip};

/// Runs `test` on a current-thread runtime with a Prometheus recorder of its own: every
/// metric the layers it builds report (their tasks run on this thread too) goes there and
/// nowhere else, so the other suites of this binary, running meanwhile, cannot change what it
/// reads, and it can read absolute values.
fn with_recorder<F, Fut>(test: F)
where
    F: FnOnce(Metrics) -> Fut,
    Fut: Future<Output = ()>,
{
    let recorder = PrometheusBuilder::new().build_recorder();
    let metrics = Metrics(recorder.handle());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(test(metrics)));
}

/// What one test's recorder has seen.
struct Metrics(PrometheusHandle);

impl Metrics {
    fn render(&self) -> String {
        self.0.render()
    }

    /// The value of the rendered sample `series` (name and labels as rendered), 0 when absent.
    fn sample(&self, series: &str) -> f64 {
        let text = self.render();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |value| value.trim().parse().expect("a number"))
    }

    fn requests(&self, rule: &str, outcome: &str) -> f64 {
        self.sample(&format!(
            "tollgate_requests_total{{rule=\"{rule}\",outcome=\"{outcome}\"}}"
        ))
    }
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/api", get(|| async { "api" }))
        .route("/shadow", get(|| async { "shadow" }))
        .route("/tier", get(|| async { "tier" }))
        .route("/health", get(|| async { "ok" }))
        .layer(layer)
}

async fn get_status(client: &reqwest::Client, url: String) -> u16 {
    client.get(url).send().await.unwrap().status().as_u16()
}

#[test]
fn memory_store_counts_each_outcome_per_rule() {
    with_recorder(|metrics| async move {
        let layer = RateLimitLayer::builder()
            .key(key::Global)
            .rule(Rule::new("m_api", Quota::per_minute(3).unwrap()).path("/api"))
            .rule(
                Rule::new("m_shadow", Quota::per_minute(1).unwrap())
                    .path("/shadow")
                    .mode(Mode::Shadow),
            )
            .rule({
                // Every client in a tier of 2 a minute: each request's policy is made anew.
                let tier = Quota::per_minute(2).unwrap();
                Rule::new("m_tier", Quota::per_minute(100).unwrap())
                    .path("/tier")
                    .quota_for(move |_| Some(tier))
            })
            .skip(Skip::new().path("/health"))
            .build()
            .unwrap();
        let addr = support::serve(app(layer)).await;
        let client = support::client();
        let mut statuses = Vec::new();
        for _ in 0..5 {
            statuses.push(get_status(&client, format!("http://{addr}/api")).await);
        }
        assert_eq!(statuses, [200, 200, 200, 429, 429]);
        for _ in 0..3 {
            assert_eq!(
                get_status(&client, format!("http://{addr}/shadow")).await,
                200
            );
        }
        for _ in 0..2 {
            assert_eq!(
                get_status(&client, format!("http://{addr}/health")).await,
                200
            );
        }
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(get_status(&client, format!("http://{addr}/tier")).await);
        }
        assert_eq!(statuses, [200, 200, 429]);

        assert_eq!(metrics.requests("m_api", "allowed"), 3.0);
        assert_eq!(metrics.requests("m_api", "denied"), 2.0);
        assert_eq!(metrics.requests("m_shadow", "allowed"), 1.0);
        assert_eq!(metrics.requests("m_shadow", "shadow_denied"), 2.0);
        assert_eq!(metrics.requests("*", "skipped"), 2.0);
        // A tier's requests count under its rule.
        assert_eq!(metrics.requests("m_tier", "allowed"), 2.0);
        assert_eq!(metrics.requests("m_tier", "denied"), 1.0);
        // Every decision was the memory store's, made at once and not timed (only calls that
        // wait are: see the Redis tests below); the memory store has no cache of denials.
        assert_eq!(metrics.sample("tollgate_denial_cache_hits_total"), 0.0);
        assert_eq!(
            metrics.sample("tollgate_store_duration_seconds_count{store=\"memory\"}"),
            0.0
        );
        assert_eq!(
            metrics.sample("tollgate_circuit_open{store=\"memory\"}"),
            0.0
        );
        assert!(
            metrics
                .render()
                .contains("tollgate_circuit_open{store=\"memory\"} 0"),
            "the gauge is set from the first call"
        );
        let text = metrics.render();
        assert!(
            !text.contains("127.0.0.1"),
            "no client key in labels:\n{text}"
        );
    });
}

#[test]
fn redis_outage_opens_the_circuit_and_counts_fallback_decisions() {
    with_recorder(|metrics| async move {
        let mut redis = support::RedisServer::start();
        let layer = RateLimitLayer::builder()
            .key(key::Global)
            .rule(Rule::new("r_api", Quota::per_minute(100).unwrap()).path("/api"))
            .store(
                RedisStore::from_url(&redis.url())
                    .unwrap()
                    .prefix(support::unique_prefix("metrics")),
            )
            .store_failure(
                StoreFailure::new(OnStoreError::FallbackToMemory)
                    .timeout(Duration::from_millis(500))
                    .open_after(2)
                    .open_for(Duration::from_secs(60), Duration::from_secs(60)),
            )
            .build()
            .unwrap();
        let addr = support::serve(app(layer)).await;
        let client = support::client();
        for _ in 0..2 {
            assert_eq!(get_status(&client, format!("http://{addr}/api")).await, 200);
        }
        assert_eq!(
            metrics.sample("tollgate_circuit_open{store=\"redis\"}"),
            0.0
        );
        assert_eq!(
            metrics.sample("tollgate_store_duration_seconds_count{store=\"redis\"}"),
            2.0
        );

        redis.stop();
        for _ in 0..4 {
            assert_eq!(get_status(&client, format!("http://{addr}/api")).await, 200);
        }
        // Two failed calls opened the circuit; the next two never reached the store. All four
        // were decided by the fallback.
        assert_eq!(
            metrics.sample("tollgate_circuit_open{store=\"redis\"}"),
            1.0
        );
        assert_eq!(metrics.sample("tollgate_fallback_decisions_total"), 4.0);
        assert_eq!(
            metrics.sample("tollgate_store_duration_seconds_count{store=\"redis\"}"),
            4.0
        );
        assert_eq!(metrics.requests("r_api", "allowed"), 6.0);
        assert_eq!(metrics.requests("r_api", "store_error"), 0.0);
    });
}

#[test]
fn a_store_that_cannot_decide_counts_store_errors() {
    with_recorder(|metrics| async move {
        let nothing_listens = format!("redis://127.0.0.1:{}", support::free_port());
        let layer = RateLimitLayer::builder()
            .key(key::Global)
            .rule(Rule::new("b_api", Quota::per_minute(100).unwrap()).path("/api"))
            .store(RedisStore::from_url(&nothing_listens).unwrap())
            .build()
            .unwrap();
        let addr = support::serve(app(layer)).await;
        let client = support::client();
        for _ in 0..3 {
            // Fail open (the default).
            assert_eq!(get_status(&client, format!("http://{addr}/api")).await, 200);
        }
        assert_eq!(metrics.requests("b_api", "store_error"), 3.0);
        assert_eq!(metrics.requests("b_api", "allowed"), 0.0);
        assert_eq!(
            metrics.sample("tollgate_store_duration_seconds_count{store=\"redis\"}"),
            3.0
        );
        assert!(
            metrics
                .render()
                .contains("tollgate_circuit_open{store=\"redis\"} 0"),
            "{}",
            metrics.render()
        );
    });
}

/// Each decision runs in a `rate_limit` span at debug with the rules that applied and the
/// outcome. (Alone in a process, with a process-wide debug subscriber.)
#[test]
fn each_decision_is_traced_with_its_rules_and_outcome() {
    support::alone(
        "metrics::each_decision_is_traced_with_its_rules_and_outcome",
        || support::block_on(decisions_traced()),
    );
}

async fn decisions_traced() {
    use tower::{Layer, ServiceExt};

    let log = support::log::Log::process_wide(tracing::Level::DEBUG);

    let layer = RateLimitLayer::builder()
        .key(key::Global)
        .rule(Rule::new("t_all", Quota::per_minute(1).unwrap()))
        .rule(Rule::new("t_api", Quota::per_minute(5).unwrap()).path("/api"))
        .build()
        .unwrap();
    let service = layer.layer(crate::ok_service());
    let request = || http::Request::get("/api").body(()).unwrap();
    let first = service.clone().oneshot(request()).await.unwrap();
    let second = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 429)
    );

    let text = log.text();
    let decisions: Vec<_> = text
        .lines()
        .filter(|l| l.contains("rate limit decision"))
        .collect();
    assert_eq!(decisions.len(), 2, "{text}");
    assert!(
        decisions[0].contains("rate_limit{rules=\"t_all,t_api\" outcome=\"proceed\"}"),
        "{text}"
    );
    assert!(
        decisions[1].contains("rate_limit{rules=\"t_all,t_api\" outcome=\"denied\"}"),
        "{text}"
    );
    assert!(decisions.iter().all(|l| l.contains("DEBUG")), "{text}");
}

#[test]
fn leases_count_calls_and_units_granted_and_returned() {
    with_recorder(|metrics| async move {
        let layer = RateLimitLayer::builder()
            .key(key::Global)
            .rule(
                Rule::new("l_api", Quota::per_minute(10).unwrap())
                    .path("/api")
                    .lease(tollgate::rules::Lease::tokens(4)),
            )
            .build()
            .unwrap();
        let addr = support::serve(app(layer)).await;
        let client = support::client();
        for _ in 0..6 {
            assert_eq!(get_status(&client, format!("http://{addr}/api")).await, 200);
        }
        let rule = "{rule=\"l_api\"}";
        // Two leases of 4: 6 units spent, 2 held.
        assert_eq!(
            metrics.sample(&format!("tollgate_lease_calls_total{rule}")),
            2.0
        );
        assert_eq!(
            metrics.sample(&format!("tollgate_lease_tokens_granted_total{rule}")),
            8.0
        );
        assert_eq!(
            metrics.sample(&format!("tollgate_lease_tokens_returned_total{rule}")),
            0.0
        );
        // The lease lasts 1 s; then its 2 unused units go back (their slots are still ahead).
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        assert_eq!(
            metrics.sample(&format!("tollgate_lease_tokens_returned_total{rule}")),
            2.0
        );
        assert_eq!(
            metrics.sample(&format!("tollgate_lease_tokens_expired_total{rule}")),
            0.0
        );
        assert_eq!(metrics.requests("l_api", "allowed"), 6.0);
    });
}

#[test]
fn slots_held_are_a_gauge_per_rule_and_refusals_are_denials() {
    use tower::ServiceExt;
    with_recorder(|metrics| async move {
        let layer = RateLimitLayer::builder()
            .key(key::Global)
            .rule(Rule::in_flight("m_slow", 2))
            .build()
            .unwrap();
        let service = tower::Layer::layer(&layer, crate::ok_service());
        let call = || service.clone().oneshot(http::Request::new(()));
        let (first, second) = (call().await.unwrap(), call().await.unwrap());
        assert_eq!(call().await.unwrap().status(), 429);
        let gauge = "tollgate_in_flight{rule=\"m_slow\"}";
        assert_eq!(metrics.sample(gauge), 2.0);
        assert_eq!(metrics.requests("m_slow", "allowed"), 2.0);
        assert_eq!(metrics.requests("m_slow", "denied"), 1.0);
        drop(first);
        assert_eq!(metrics.sample(gauge), 1.0);
        drop(second);
        assert_eq!(metrics.sample(gauge), 0.0);
    });
}
