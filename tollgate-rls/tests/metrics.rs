//! The built `tollgate-rls`'s statistics: request values chosen by clients (detailed_metric
//! values, unknown domains) cannot make `/metrics` grow without bound, the reference's
//! settings and names for them, and its way of counting near and over hits.

mod support;

use support::{ask, descriptor, http, request, Rls, Runtime};
use tollgate_rls::proto::rate_limit_response::Code;
use tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::proto::RateLimitRequest;
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;

const VALUES: &str = "\
domain: values
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: { unit: hour, requests_per_unit: 1000000 }
  - key: remote_address
    rate_limit: { unit: hour, requests_per_unit: 1000000 }
";

/// A string of `len` letters from a xorshift generator seeded with `seed`.
fn random_text(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

/// Answers `requests` from 16 tasks at once.
async fn send_all(client: &RateLimitServiceClient<Channel>, requests: Vec<RateLimitRequest>) {
    let mut queues: Vec<Vec<RateLimitRequest>> = (0..16).map(|_| Vec::new()).collect();
    for (i, r) in requests.into_iter().enumerate() {
        queues[i % 16].push(r);
    }
    let tasks: Vec<_> = (queues.into_iter())
        .map(|queue| {
            let mut client = client.clone();
            tokio::spawn(async move {
                for r in queue {
                    let answer = ask(&mut client, r).await;
                    assert_eq!(answer.overall_code, OK);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_chosen_values_leave_metrics_bounded() {
    let runtime = Runtime::new("values");
    runtime.write("values.yaml", VALUES);
    let rls = Rls::start(&runtime, &[("LOG_LEVEL", "warn")]);
    let client = rls.client().await;
    // 20,000 distinct detailed_metric values, ten to a request.
    let detailed = (0..2_000)
        .map(|r| RateLimitRequest {
            domain: "values".into(),
            descriptors: (0..10)
                .map(|d| descriptor(&[("user", &format!("user{}", r * 10 + d))]))
                .collect(),
            hits_addend: 0,
        })
        .collect();
    send_all(&client, detailed).await;
    // 2,000 random unknown domains as long as a domain may be (`MAX_DOMAIN_BYTES`), and an
    // address.
    let longest = tollgate_rls::MAX_DOMAIN_BYTES;
    let mut unknown: Vec<_> = (0..2_000u64)
        .map(|seed| request(&random_text(seed + 1, longest), &[&[("user", "a")]]))
        .collect();
    unknown.push(request("values", &[&[("remote_address", "10.0.0.1")]]));
    send_all(&client, unknown).await;
    // Longer ones (the 1,000 characters) are refused before anything counts them.
    let mut one = client.clone();
    let refused = one
        .should_rate_limit(request(&random_text(7, 1_000), &[&[("user", "a")]]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);

    let url = format!("http://{}/metrics", rls.http);
    let body = http().get(url).send().await.unwrap().text().await.unwrap();
    let total = |labels: &str| {
        let line = format!("ratelimit_service_rate_limit_total_hits{{{labels}}} ");
        (body.lines())
            .find_map(|l| l.strip_prefix(line.as_str()))
            .map(|v| v.parse::<u64>().unwrap())
    };
    eprintln!("/metrics: {} bytes", body.len());
    assert!(
        body.len() < 2 * 1024 * 1024,
        "/metrics is {} bytes",
        body.len()
    );
    // The default bound, 1,000 series, then the overflow series.
    let detailed_series = (body.lines())
        .filter(|l| {
            l.starts_with("ratelimit_service_rate_limit_total_hits{domain=\"values\",key1=\"user_")
        })
        .count();
    assert_eq!(detailed_series, 1_000);
    assert_eq!(total("overflow=\"true\""), Some(19_000));
    assert_eq!(total("domain=\"values\",key1=\"user_user0\""), Some(1));
    // Unknown domains are counted, not named.
    assert!(body.contains("\nratelimit_service_rate_limit_domain_not_found 2000\n"));
    // The reference's sanitizing keeps an address one label (src/utils/utilities.go,
    // SanitizeStatName); this limit is not detailed, so its key is the configured one.
    assert_eq!(total("domain=\"values\",key1=\"remote_address\""), Some(1));
}

#[tokio::test]
async fn stats_max_series_sets_the_bound() {
    let runtime = Runtime::new("max-series");
    runtime.write("values.yaml", VALUES);
    let rls = Rls::start(
        &runtime,
        &[("LOG_LEVEL", "warn"), ("STATS_MAX_SERIES", "3")],
    );
    let mut client = rls.client().await;
    for user in ["a", "b", "c", "d", "e", "10.0.0.1"] {
        ask(&mut client, request("values", &[&[("user", user)]])).await;
    }
    let url = format!("http://{}/metrics", rls.http);
    let body = http().get(url).send().await.unwrap().text().await.unwrap();
    let mut series: Vec<_> = (body.lines())
        .filter(|l| l.starts_with("ratelimit_service_rate_limit_total_hits{"))
        .collect();
    series.sort_unstable();
    assert_eq!(
        series,
        [
            "ratelimit_service_rate_limit_total_hits{domain=\"values\",key1=\"user_a\"} 1",
            "ratelimit_service_rate_limit_total_hits{domain=\"values\",key1=\"user_b\"} 1",
            "ratelimit_service_rate_limit_total_hits{domain=\"values\",key1=\"user_c\"} 1",
            "ratelimit_service_rate_limit_total_hits{overflow=\"true\"} 3",
        ],
        "{body}"
    );
}

/// `NEAR_LIMIT_RATIO` (the reference's `settings.go`) and its way of counting
/// (`base_limiter.go`, `checkNearLimitThreshold`): of 7 hits on a limit of 10 with a ratio of
/// 0.5, the 2 past 5 are near the limit; of 6 more, refused, the 3 past 10 are over and the 3
/// between 7 and 10 near.
#[tokio::test]
async fn near_limit_ratio_sets_where_near_starts() {
    let runtime = Runtime::new("near-ratio");
    runtime.write(
        "near.yaml",
        "domain: near\ndescriptors:\n  - key: k\n    rate_limit: { unit: day, requests_per_unit: 10 }\n",
    );
    let rls = Rls::start(
        &runtime,
        &[("LOG_LEVEL", "warn"), ("NEAR_LIMIT_RATIO", "0.5")],
    );
    let mut client = rls.client().await;
    for hits in [7, 6] {
        let mut r = request("near", &[&[("k", "v")]]);
        r.hits_addend = hits;
        ask(&mut client, r).await;
    }
    let url = format!("http://{}/metrics", rls.http);
    let body = http().get(url).send().await.unwrap().text().await.unwrap();
    let count = |name: &str| {
        let prefix = format!("ratelimit_service_rate_limit_{name}{{domain=\"near\",key1=\"k\"}} ");
        (body.lines())
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .map(|v| v.parse::<u64>().unwrap())
    };
    assert_eq!(count("total_hits"), Some(13), "{body}");
    assert_eq!(count("within_limit"), Some(7));
    assert_eq!(count("near_limit"), Some(5));
    assert_eq!(count("over_limit"), Some(3));
}

/// The reference's `USE_PROMETHEUS`, `PROMETHEUS_ADDR` and `PROMETHEUS_PATH` (`settings.go`;
/// `runner.go` serves its Prometheus sink there): the same metrics, scraped where it put them,
/// and still on `HOST:PORT/metrics`.
#[tokio::test]
async fn use_prometheus_serves_the_metrics_on_prometheus_addr() {
    let runtime = Runtime::new("prometheus-addr");
    runtime.write("values.yaml", VALUES);
    let port = support::free_port();
    let address = format!("127.0.0.1:{port}");
    let rls = Rls::start(
        &runtime,
        &[
            ("USE_STATSD", "false"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", address.as_str()),
            ("PROMETHEUS_PATH", "/stats"),
        ],
    );
    let mut client = rls.client().await;
    ask(
        &mut client,
        request("values", &[&[("remote_address", "a")]]),
    )
    .await;
    let series =
        "ratelimit_service_rate_limit_total_hits{domain=\"values\",key1=\"remote_address\"} 1";
    let get = |url: String| async move {
        let response = http().get(url).send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    };
    let (status, body) = get(format!("http://{address}/stats")).await;
    assert_eq!(status, 200);
    assert!(body.contains(series), "{body}");
    assert_eq!(get(format!("http://{address}/metrics")).await.0, 404);
    let (status, body) = get(format!("http://{}/metrics", rls.http)).await;
    assert_eq!(status, 200);
    assert!(body.contains(series), "{body}");
}

/// The reference's call statistics, as its mapping names them (`default_mapper.yaml`):
/// `total_requests` and `response_time` per gRPC method (`src/metrics/metrics.go`), and
/// `should_rate_limit_error` by `err_type` (`src/service/ratelimit.go`, lines 424-433:
/// `redis_error` when the store fails, `service_error` for a malformed request).
#[tokio::test]
async fn calls_and_errors_are_counted_as_the_reference_names_them() {
    let runtime = Runtime::new("call-stats");
    runtime.write("values.yaml", VALUES);
    // A Redis that stops answering after the start: every decision fails, answered with a
    // gRPC error as the reference answers (src/service/ratelimit.go, ShouldRateLimit's
    // recover).
    let redis = support::RedisServer::start();
    let url = format!("127.0.0.1:{}", redis.port);
    let rls = Rls::start(
        &runtime,
        &[
            ("REDIS_URL", url.as_str()),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("STORE_TIMEOUT", "100ms"),
            ("LOG_LEVEL", "error"),
        ],
    );
    let mut client = rls.client().await;
    redis.pause();
    let failed = client
        .should_rate_limit(request("values", &[&[("remote_address", "a")]]))
        .await;
    assert_eq!(failed.unwrap_err().code(), tonic::Code::Unknown);
    let malformed = client
        .should_rate_limit(request("", &[&[("user", "a")]]))
        .await;
    assert!(malformed.is_err());
    let url = format!("http://{}/metrics", rls.http);
    let body = http().get(url).send().await.unwrap().text().await.unwrap();
    let value = |series: &str| {
        let prefix = format!("{series} ");
        (body.lines())
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .map(|v| v.parse::<f64>().unwrap())
    };
    let method = "{grpc_method=\"ShouldRateLimit\"}";
    assert_eq!(
        value(&format!("ratelimit_service_total_requests{method}")),
        Some(2.0),
        "{body}"
    );
    assert_eq!(
        value(&format!(
            "ratelimit_service_response_time_seconds_count{method}"
        )),
        Some(2.0)
    );
    let error = |kind: &str| {
        value(&format!(
            "ratelimit_service_should_rate_limit_error{{err_type=\"{kind}\"}}"
        ))
    };
    assert_eq!(error("redis_error"), Some(1.0));
    assert_eq!(error("service_error"), Some(1.0));
}
