//! The built `tollgate-rls`'s `/metrics` shaped as the reference's Prometheus sink shapes it
//! (`src/stats/prom/prometheus_sink.go` with its `default_mapper.yaml`): the response time a
//! histogram of Prometheus's default buckets, the mapping's `scale` and names honoured
//! (`PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`, `PROMETHEUS_MAPPER_YAML`), the process's own
//! series, and `service_error` and `domain_not_found` counted as the reference counts them.

mod support;

use support::{descriptor, free_port, get_text, request, Rls, Runtime};
use tollgate_rls::proto::RateLimitRequest;

const EDGE: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1000 }
";

fn runtime(test: &str) -> Runtime {
    let runtime = Runtime::new(test);
    runtime.write("edge.yaml", EDGE);
    runtime
}

/// `name{labels} value` of `text`, if there.
fn value(text: &str, series: &str) -> Option<f64> {
    let prefix = format!("{series} ");
    (text.lines())
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|v| v.parse().unwrap())
}

const METHOD: &str = "grpc_method=\"ShouldRateLimit\"";

/// The default mapping's `ratelimit_server.*.response_time`: `timer_type: histogram`, no
/// buckets of its own (statsd_exporter gives client_golang's `DefBuckets`), `scale: 0.001`
/// (the timer's milliseconds as seconds).
#[tokio::test]
async fn the_response_time_is_a_histogram_of_the_references_buckets() {
    let runtime = runtime("histogram");
    let rls = Rls::start(&runtime, &[]);
    let mut client = rls.client().await;
    for _ in 0..3 {
        support::ask(&mut client, request("edge", &[&[("user", "a")]])).await;
    }
    let text = get_text(format!("http://{}/metrics", rls.http)).await;
    let name = "ratelimit_service_response_time_seconds";
    assert!(text.contains(&format!("# TYPE {name} histogram")), "{text}");
    for le in [
        "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
    ] {
        let bucket = format!("{name}_bucket{{{METHOD},le=\"{le}\"}}");
        assert!(value(&text, &bucket).is_some(), "{bucket} in {text}");
    }
    let all = value(&text, &format!("{name}_bucket{{{METHOD},le=\"+Inf\"}}"));
    assert_eq!(all, Some(3.0), "{text}");
    // Seconds: three local decisions take far less than a second in all.
    let sum = value(&text, &format!("{name}_sum{{{METHOD}}}")).unwrap();
    assert!(sum < 1.0, "{sum}");
}

/// The prometheus sink's `mapperConfig`: with `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS` the
/// default mapping loses its `scale: 0.001`, so the same series holds milliseconds; a file in
/// `PROMETHEUS_MAPPER_YAML` replaces the mapping (its names, labels, scale and buckets).
#[tokio::test]
async fn the_mappings_scale_and_names_are_honoured() {
    let runtime = runtime("mapping");
    let prometheus = |port: &str| {
        [
            ("USE_STATSD", "false".to_owned()),
            ("USE_PROMETHEUS", "true".to_owned()),
            ("PROMETHEUS_ADDR", format!("127.0.0.1:{port}")),
        ]
    };
    let port = free_port().to_string();
    let mut env: Vec<(&str, String)> = prometheus(&port).into();
    env.push(("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let rls = Rls::start(&runtime, &env);
    let mut client = rls.client().await;
    support::ask(&mut client, request("edge", &[&[("user", "a")]])).await;
    let text = get_text(format!("http://127.0.0.1:{port}/metrics")).await;
    let name = "ratelimit_service_response_time_seconds";
    assert!(
        value(&text, &format!("{name}_bucket{{{METHOD},le=\"10\"}}")).is_some(),
        "{text}"
    );
    drop(rls);

    let mapping = runtime.root.join("mapper.yaml");
    std::fs::write(
        &mapping,
        r#"
mappings:
  - match: "ratelimit_server.*.response_time"
    name: "rls_response_ms"
    timer_type: histogram
    buckets: [1, 1000, 60000]
    labels: { method: "$1" }
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "rls_hits"
    labels: { domain: "$1", descriptor: "$2" }
  - match: "ratelimit.service.config_load_success"
    name: "ignored"
    action: drop
"#,
    )
    .unwrap();
    let port = free_port().to_string();
    let mut env: Vec<(&str, String)> = prometheus(&port).into();
    env.push(("PROMETHEUS_MAPPER_YAML", mapping.display().to_string()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let rls = Rls::start(&runtime, &env);
    let mut client = rls.client().await;
    support::ask(&mut client, request("edge", &[&[("user", "a")]])).await;
    let text = get_text(format!("http://127.0.0.1:{port}/metrics")).await;
    let method = "method=\"ShouldRateLimit\"";
    for le in ["1", "1000", "60000", "+Inf"] {
        let bucket = format!("rls_response_ms_bucket{{{method},le=\"{le}\"}}");
        assert!(value(&text, &bucket).is_some(), "{bucket} in {text}");
    }
    let hits = "rls_hits{descriptor=\"user\",domain=\"edge\"}";
    assert_eq!(value(&text, hits), Some(1.0), "{text}");
    assert!(
        !text.contains("ratelimit_service_config_load_success"),
        "{text}"
    );
    // Without a mapping of its own: the statsd name made a Prometheus name, unlabelled.
    let total = "ratelimit_server_ShouldRateLimit_total_requests";
    assert_eq!(value(&text, total), Some(1.0), "{text}");
}

/// A mapping file that cannot be read, or is not a mapping, stops the start naming the
/// variable (the reference would ignore the error and serve every series unmapped).
#[test]
fn a_mapping_file_that_does_not_load_stops_the_start() {
    let runtime = runtime("bad-mapping");
    let bad = runtime.root.join("bad.yaml");
    std::fs::write(&bad, "mappings: [{match: 'a.*'}]").unwrap();
    let bad = bad.display().to_string();
    for path in ["/nonexistent/mapper.yaml", bad.as_str()] {
        let (status, stderr) = support::run_to_exit(
            &runtime.root,
            &[
                ("USE_STATSD", "false"),
                ("USE_PROMETHEUS", "true"),
                ("PROMETHEUS_ADDR", "127.0.0.1:0"),
                ("PROMETHEUS_MAPPER_YAML", path),
            ],
        );
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("PROMETHEUS_MAPPER_YAML="), "{stderr}");
    }
}

/// The process's own series, as the reference's Prometheus client exports Go's process
/// collector's (`process_cpu_seconds_total`, `process_resident_memory_bytes`, …).
#[tokio::test]
async fn the_process_series_are_exported() {
    let runtime = runtime("process");
    let rls = Rls::start(&runtime, &[]);
    let text = get_text(format!("http://{}/metrics", rls.http)).await;
    for series in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        let found = value(&text, series);
        assert!(found.is_some_and(|v| v >= 0.0), "{series} in {text}");
    }
    assert!(value(&text, "process_resident_memory_bytes").unwrap() > 1e6);
}

/// The reference counts `domain_not_found` once per descriptor looked up
/// (`src/config/config_impl.go`, `GetLimit`, called for each descriptor by
/// `src/service/ratelimit.go`'s `constructLimitsToCheck`), and `service_error` for a request
/// answered while no configuration is loaded (`checkServiceErr(snappedConfig != nil, …)`,
/// counted by `ShouldRateLimit`'s recover, lines 430-433).
#[tokio::test]
async fn domain_not_found_per_descriptor_and_service_error_without_a_configuration() {
    let runtime = runtime("counts");
    let rls = Rls::start(&runtime, &[]);
    let mut client = rls.client().await;
    let three: RateLimitRequest = RateLimitRequest {
        domain: "nowhere".into(),
        descriptors: vec![
            descriptor(&[("a", "1")]),
            descriptor(&[("b", "2")]),
            descriptor(&[("c", "3")]),
        ],
        hits_addend: 0,
    };
    support::ask(&mut client, three).await;
    let text = get_text(format!("http://{}/metrics", rls.http)).await;
    let not_found = "ratelimit_service_rate_limit_domain_not_found";
    assert_eq!(value(&text, not_found), Some(3.0), "{text}");

    let broken = Runtime::new("counts-broken");
    broken.write("edge.yaml", &EDGE.replace("hour", "fortnight"));
    let rls = Rls::start(&broken, &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")]);
    let mut client = rls.client().await;
    let answer = client
        .should_rate_limit(request("edge", &[&[("user", "a")]]))
        .await;
    assert_eq!(answer.unwrap_err().code(), tonic::Code::Unknown);
    let text = get_text(format!("http://{}/metrics", rls.http)).await;
    let service_error = "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"}";
    assert_eq!(value(&text, service_error), Some(1.0), "{text}");
}
