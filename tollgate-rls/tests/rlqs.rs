//! Envoy's Rate Limit Quota Service, served by the built `tollgate-rls` on its gRPC port (and
//! by the library in process), against a client that acts as Envoy's `rate_limit_quota`
//! filter does (`rlqs/filter.rs`, written from Envoy's source). Envoy's source could not be
//! fetched whole; its files were read from a stored copy of envoyproxy/envoy (commit 0b55961
//! for global_client_impl.cc; 0aeb408 for filter_persistence.cc, `initTlsStore`, whose report
//! interval is a hardcoded 5000 ms with a TODO to honour `reporting_interval`), and the
//! citations name functions rather than line numbers.

mod rlqs {
    pub mod filter;
}
mod control_plane;
mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::BlanketRule;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use rlqs::filter::{bucket_id, Applied, Filter};
use support::{get_text, RedisServer, Rls, Runtime};
use tonic::transport::Channel;
use tollgate_rls::{RateLimitQuotaService, RateLimitService, RlsConfig};

const EDGE: &str = "domain: edge
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 600 }
  - key: free
    rate_limit: { unlimited: true }
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: closed
    rate_limit: { unit: minute, requests_per_unit: 0 }
  - key: a
    descriptors:
      - key: b
        rate_limit: { unit: minute, requests_per_unit: 600 }
";

fn runtime(test: &str, yaml: &str) -> Runtime {
    let runtime = Runtime::new(test);
    runtime.write("edge.yaml", yaml);
    runtime
}

async fn channel(rls: &Rls) -> Channel {
    Channel::from_shared(format!("http://{}", rls.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The rule or token bucket a filter applies to `bucket`.
fn rule(filter: &Filter, bucket: &[(&str, &str)]) -> Option<BlanketRule> {
    match filter.applied(bucket) {
        Some((Applied::Blanket(rule), _)) => Some(rule),
        _ => None,
    }
}

fn tokens(filter: &Filter, bucket: &[(&str, &str)]) -> Option<u32> {
    match filter.applied(bucket) {
        Some((Applied::Tokens { spec, .. }, _)) => Some(spec.max_tokens),
        _ => None,
    }
}

/// A bucket `{k: v}` is the descriptor entry `k`=`v` of the stream's domain, several keys
/// sorted by key (`{b, a}` matches `a` then `b`); the first report of each bucket, alone with
/// `time_elapsed` 0 s (global_client_impl.cc, `createBucketImpl` and `getUsageFromBucket`),
/// is answered. No limit and `unlimited` get `ALLOW_ALL`, a `shadow_mode` limit `ALLOW_ALL`,
/// a limit of 0 `DENY_ALL`; a limit a token bucket (applied as `onQuotaResponseImpl` applies
/// `kBlanketRule` and `kTokenBucket`), with a TTL in whole seconds, never unset
/// (`startActionExpirationTimer` reads only `seconds`).
#[tokio::test]
async fn buckets_map_to_descriptors_and_get_the_guides_answers() {
    let runtime = runtime("rlqs_mapping", EDGE);
    let rls = Rls::start(&runtime, &[]);
    let mut filter = Filter::new(channel(&rls).await, "edge");
    let buckets: [&[(&str, &str)]; 6] = [
        &[("tenant", "t1")],
        &[("free", "x")],
        &[("shadow", "y")],
        &[("closed", "z")],
        &[("nothing", "matches")],
        &[("b", "2"), ("a", "1")],
    ];
    for (i, bucket) in buckets.iter().enumerate() {
        assert!(
            filter.request(bucket).await,
            "first requests follow no_assignment_behavior"
        );
        assert!(filter.wait_responses(i + 1, Duration::from_secs(5)).await);
    }
    assert!(tokens(&filter, buckets[0]).is_some_and(|t| t >= 1));
    assert_eq!(rule(&filter, buckets[1]), Some(BlanketRule::AllowAll));
    assert_eq!(rule(&filter, buckets[2]), Some(BlanketRule::AllowAll));
    assert_eq!(rule(&filter, buckets[3]), Some(BlanketRule::DenyAll));
    assert_eq!(rule(&filter, buckets[4]), Some(BlanketRule::AllowAll));
    assert!(
        tokens(&filter, buckets[5]).is_some(),
        "sorted entries a=1, b=2 meet a/b's limit"
    );
    let answer = filter.last_response().unwrap();
    let Some(Action::QuotaAssignmentAction(a)) = &answer.bucket_action[0].bucket_action else {
        panic!("an assignment: {answer:?}");
    };
    let ttl = a.assignment_time_to_live.unwrap();
    assert!(ttl.seconds >= 1 && ttl.nanos == 0, "{ttl:?}");
    assert!(!filter.request(buckets[3]).await, "DENY_ALL applies");
    assert!(filter.ended().is_none());
}

/// A malformed report ends its stream with `INVALID_ARGUMENT` naming the reason; another
/// stream on the same connection keeps going. (Envoy reopens a closed stream at its next
/// report tick: global_client_impl.cc, `onSendReportsTimer`.)
#[tokio::test]
async fn a_malformed_report_ends_only_its_stream() {
    let runtime = runtime("rlqs_malformed", EDGE);
    let rls = Rls::start(&runtime, &[]);
    let shared = channel(&rls).await;
    let mut bad = Filter::new(shared.clone(), "edge");
    let mut good = Filter::new(shared.clone(), "edge");
    assert!(good.request(&[("tenant", "g")]).await);
    assert!(good.wait_responses(1, Duration::from_secs(5)).await);

    let mut twice = report("edge", &[("tenant", "x")]);
    twice
        .bucket_quota_usages
        .push(twice.bucket_quota_usages[0].clone());
    let cases: [(RateLimitQuotaUsageReports, &str); 4] = [
        (report("edge", &[]), "a bucket_id without keys"),
        (report("", &[("tenant", "x")]), "the domain is empty"),
        (twice, "reported twice"),
        (
            report("edge", &[("tenant", "x")]),
            "the domain changed on the stream",
        ),
    ];
    for (i, (case, reason)) in cases.into_iter().enumerate() {
        let mut bad_filter = Filter::new(shared.clone(), "edge");
        let last = i == 3;
        let filter = if last { &mut bad } else { &mut bad_filter };
        if last {
            filter.send_raw(report("other", &[("tenant", "x")])).await;
            assert!(filter.wait_responses(1, Duration::from_secs(5)).await);
        }
        filter.send_raw(case).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while filter.ended().is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let status = filter.ended().flatten().expect("an error");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(reason), "{status:?}");
    }
    good.report().await;
    assert!(good.wait_responses(2, Duration::from_secs(5)).await);
    assert!(good.ended().is_none());
}

fn report(domain: &str, bucket: &[(&str, &str)]) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.to_owned(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(bucket_id(bucket)),
            time_elapsed: Some(Default::default()),
            num_requests_allowed: 1,
            num_requests_denied: 0,
        }],
    }
}

/// A tollgate-rls asked to stop first sends every stream a zero-TTL assignment for each of
/// its buckets, so the Envoy falls back to its `expired_assignment_behavior` at once
/// (global_client_impl.cc: `startActionExpirationTimer` arms the timer with the TTL's
/// seconds; `onActionExpirationTimer` then applies the fallback).
#[tokio::test]
async fn stopping_sends_zero_ttl_assignments_first() {
    let runtime = runtime("rlqs_stop", EDGE);
    let rls = Rls::start(&runtime, &[]);
    let mut filter = Filter::new(channel(&rls).await, "edge");
    assert!(filter.request(&[("tenant", "s")]).await);
    assert!(filter.request(&[("free", "s")]).await);
    assert!(filter.wait_responses(2, Duration::from_secs(5)).await);
    rls.signal_stop();
    assert!(filter.wait_responses(3, Duration::from_secs(5)).await);
    let last = filter.last_response().unwrap();
    assert_eq!(last.bucket_action.len(), 2, "{last:?}");
    for action in &last.bucket_action {
        let Some(Action::QuotaAssignmentAction(a)) = &action.bucket_action else {
            panic!("{last:?}");
        };
        assert_eq!(a.assignment_time_to_live.unwrap().seconds, 0);
        assert!(
            a.rate_limit_strategy.is_some(),
            "a strategy, or Envoy ignores the action"
        );
    }
    let _ = rls.stop();
}

/// A bucket that reports no request for the stated time is abandoned: Envoy erases it
/// (global_client_impl.cc, `onQuotaResponseImpl`, `abandon_action`) and its next request
/// starts over as a first request. Idle buckets are still reported, with 0 and 0
/// (`buildReports` reports every cached bucket), so "stops reporting" means "reports no
/// usage". In process, with the library, and an abandon time of 2 s.
#[tokio::test]
async fn an_idle_bucket_is_abandoned() {
    let service = memory_service(EDGE);
    let quotas = RateLimitQuotaService::with_abandon_after(&service, Duration::from_secs(2));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(quotas.into_server())
            .serve_with_incoming(incoming),
    );
    let channel = Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut filter = Filter::new(channel, "edge");
    let bucket: &[(&str, &str)] = &[("tenant", "idle")];
    assert!(filter.request(bucket).await);
    assert!(filter.wait_responses(1, Duration::from_secs(5)).await);
    for n in 2..=3 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        filter.report().await;
        assert!(filter.wait_responses(n, Duration::from_secs(5)).await);
    }
    assert!(
        !filter.has_bucket(bucket),
        "abandoned after 2 s of no usage"
    );
    let last = filter.last_response().unwrap();
    assert!(matches!(
        last.bucket_action[0].bucket_action,
        Some(Action::AbandonAction(_))
    ));
}

/// Statistics per domain: streams, buckets, reports, assignments, abandons; per bucket family
/// (the limit's configured name), quota assigned against used. A domain the configuration
/// does not have is `unknown`, so clients cannot grow the series.
#[tokio::test]
async fn statistics_count_per_configured_domain() {
    let runtime = runtime("rlqs_stats", EDGE);
    let rls = Rls::start(&runtime, &[]);
    let mut filter = Filter::new(channel(&rls).await, "edge");
    let mut stranger = Filter::new(channel(&rls).await, "made-up-by-a-client");
    assert!(filter.request(&[("tenant", "m")]).await);
    assert!(stranger.request(&[("tenant", "m")]).await);
    assert!(filter.wait_responses(1, Duration::from_secs(5)).await);
    assert!(stranger.wait_responses(1, Duration::from_secs(5)).await);
    let metrics = get_text(format!("http://{}/metrics", rls.http)).await;
    for line in [
        "ratelimit_rlqs_streams{domain=\"edge\"} 1",
        "ratelimit_rlqs_buckets{domain=\"edge\"} 1",
        "ratelimit_rlqs_reports_total{domain=\"edge\"} 1",
        "ratelimit_rlqs_assignments_total{domain=\"edge\"} 1",
        "ratelimit_rlqs_streams{domain=\"unknown\"} 1",
        "ratelimit_rlqs_quota_assigned_total{family=\"edge.tenant\"} 6",
        "ratelimit_rlqs_quota_used_total{family=\"edge.tenant\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
    assert!(!metrics.contains("made-up-by-a-client"));
}

/// The Verify's shape: a limit per window, the filters' demand, and how long they offer it.
/// CI runs the short shape; `TOLLGATE_RLQS_VERIFY=full` runs the issue's own (eight filters
/// over 3 minutes at 600 per minute).
#[derive(Clone, Copy)]
struct Shape {
    limit: u64,
    window_secs: u64,
    /// Requests a second each filter offers: together above the limit, and uneven.
    rates: &'static [u64],
    run: Duration,
    /// What one report period of assignment lag may add to a window (the guide's bound).
    lag: u64,
}

impl Shape {
    /// 600 per 20 s windows, four filters asking 4, 8, 12 and 16 a second (40 against 30),
    /// over 70 s: two full windows at least after the first report. (Windows of two report
    /// periods, 300 per 10 s, used 88 to 94% of the limit with this demand: the guide says
    /// why.)
    const SHORT: Shape = Shape {
        limit: 600,
        window_secs: 20,
        rates: &[4, 8, 12, 16],
        run: Duration::from_secs(70),
        lag: 300,
    };

    /// 600 per minute, eight filters asking 1 to 8 a second (36 against 10), over 3 minutes.
    const FULL: Shape = Shape {
        limit: 600,
        window_secs: 60,
        rates: &[1, 2, 3, 4, 5, 6, 7, 8],
        run: Duration::from_secs(180),
        lag: 300,
    };

    fn from_env() -> Shape {
        match std::env::var("TOLLGATE_RLQS_VERIFY").as_deref() {
            Ok("full") => Shape::FULL,
            _ => Shape::SHORT,
        }
    }

    fn yaml(&self) -> String {
        format!(
            "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {{ unit: second, unit_multiplier: {}, requests_per_unit: {} }}\n",
            self.window_secs, self.limit
        )
    }

    fn window_of(&self, t: &SystemTime) -> u64 {
        t.duration_since(UNIX_EPOCH).unwrap().as_secs() / self.window_secs
    }
}

/// The Verify (`Shape`), shortened for CI, with the same assertions: per window at
/// most the limit plus what one report period of assignment lag can add (the guide's bound:
/// here half the limit, as the demand grants one period at a time); at least 90% of the limit
/// used while demand exceeds it; shares that follow demand. Envoy reports every 5 s
/// (filter_persistence.cc), and its token bucket is applied as `onQuotaResponseImpl`
/// applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_limit_holds_across_two_instances() {
    let shape = Shape::from_env();
    let redis = RedisServer::start();
    let url = redis.url();
    let runtime = runtime("rlqs_global", &shape.yaml());
    let env = [("REDIS_URL", url.as_str())];
    let one = Rls::start(&runtime, &env);
    let two = Rls::start(&runtime, &env);
    let channels = [channel(&one).await, channel(&two).await];
    let load = offer_load(shape, |i| vec![channels[i % 2].clone()]).await;
    load.assert_within_limit(Duration::from_secs(5));
    load.assert_shares_follow_demand();
}

/// Killing one of two instances (SIGKILL: no zero-TTL goodbye): its Envoys' streams break,
/// they reopen them at their next report tick (global_client_impl.cc, `onRemoteClose` then
/// `onSendReportsTimer`) on the other instance behind their cluster (the other one), and the
/// global limit holds throughout; the limit is used again once the killed instance's
/// assignments have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_instance_keeps_the_global_limit() {
    let shape = Shape {
        run: Duration::from_secs(80),
        ..Shape::SHORT
    };
    let redis = RedisServer::start();
    let url = redis.url();
    let runtime = runtime("rlqs_kill", &shape.yaml());
    let env = [("REDIS_URL", url.as_str())];
    let one = Rls::start(&runtime, &env);
    let two = Rls::start(&runtime, &env);
    let channels = [channel(&one).await, channel(&two).await];
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        one.stop_with("-KILL")
    });
    let cluster = |i: usize| vec![channels[i % 2].clone(), channels[(i + 1) % 2].clone()];
    let load = offer_load(shape, cluster).await;
    killer.await.unwrap();
    load.assert_within_limit(Duration::from_secs(15));
    assert!(load.reconnected, "a filter's stream broke and was reopened");
    drop(two);
}

/// What the filters admitted, each request's time.
struct Load {
    shape: Shape,
    per_filter: Vec<Vec<SystemTime>>,
    started: SystemTime,
    ended: SystemTime,
    reconnected: bool,
}

/// The shape's filters on one bucket, each offering its rate for the shape's run and
/// reporting every 5 s as Envoy does.
async fn offer_load(shape: Shape, cluster: impl Fn(usize) -> Vec<Channel>) -> Load {
    let started_at = SystemTime::now();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, &rate) in shape.rates.iter().enumerate() {
        let mut filter = Filter::over(cluster(i), "edge");
        tasks.push(tokio::spawn(async move {
            let mut allowed_at = Vec::new();
            let mut requests = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
            let mut reports = tokio::time::interval_at(
                tokio::time::Instant::now() + Duration::from_secs(5),
                Duration::from_secs(5),
            );
            while started.elapsed() < shape.run {
                tokio::select! {
                    _ = requests.tick() => {
                        if filter.request(&[("tenant", "shared")]).await {
                            allowed_at.push(SystemTime::now());
                        }
                    }
                    _ = reports.tick() => filter.report().await,
                }
            }
            (allowed_at, filter.streams_opened())
        }));
    }
    let mut per_filter = Vec::new();
    let mut reconnected = false;
    for task in tasks {
        let (allowed_at, streams) = task.await.unwrap();
        per_filter.push(allowed_at);
        reconnected |= streams > 1;
    }
    Load {
        shape,
        per_filter,
        started: started_at,
        ended: SystemTime::now(),
        reconnected,
    }
}

impl Load {
    /// Every window within the limit plus one period's lag; the full windows from `settled`
    /// after the start on at least 90% of the limit together.
    fn assert_within_limit(&self, settled: Duration) {
        let Shape { limit, lag, .. } = self.shape;
        let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
        for t in self.per_filter.iter().flatten() {
            *per_window.entry(self.shape.window_of(t)).or_default() += 1;
        }
        eprintln!("admitted per window of {limit}: {per_window:?}");
        for (w, &n) in &per_window {
            assert!(
                n <= limit + lag,
                "window {w}: {n} admitted, over {limit} + one period's lag ({lag})"
            );
        }
        let first_full = self.shape.window_of(&(self.started + settled)) + 1;
        let last_full = self.shape.window_of(&self.ended) - 1;
        assert!(
            first_full < last_full,
            "two full windows to measure at least"
        );
        // Quota spent near a window's end spills into the next one, so one window may fall
        // short where the next one is over: the use is measured over the full windows.
        let full = last_full - first_full + 1;
        let used: u64 = (first_full..=last_full)
            .map(|w| per_window.get(&w).copied().unwrap_or(0))
            .sum();
        assert!(
            used * 10 >= 9 * limit * full,
            "{used} admitted in {full} full windows, under 90% of {limit} each: {per_window:?}"
        );
    }

    /// More demand, a larger share: each filter admitted more than the one asking less.
    fn assert_shares_follow_demand(&self) {
        let shares: Vec<usize> = self.per_filter.iter().map(Vec::len).collect();
        eprintln!(
            "admitted per filter (demand {:?} per second): {shares:?}",
            self.shape.rates
        );
        assert!(
            shares.windows(2).all(|w| w[0] < w[1]),
            "shares follow demand: {shares:?}"
        );
    }
}

/// The quota of an assignment is reserved from the same counter `ShouldRateLimit` counts in,
/// and what the Envoy did not use of it goes back at its next report: demand of 1 request
/// over the first report (`time_elapsed` 0 s, taken as 1 s) reserves 6 units (one 5 s period
/// and a tenth more), and a report of 2 allowed in 1 s gives 4 back and reserves 11.
/// In process, with the library on its memory store.
#[tokio::test]
async fn unused_quota_returns_to_the_pool() {
    let yaml = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: hour, requests_per_unit: 1000 }\n";
    let service = memory_service(yaml);
    let (mut filter, _server) = in_process(&service).await;
    let bucket: &[(&str, &str)] = &[("tenant", "pool")];
    let remaining = || async {
        let request = support::request("edge", &[bucket]);
        let answer = service.decide(&request).await.unwrap();
        answer.statuses[0].limit_remaining
    };
    assert!(filter.request(bucket).await);
    assert!(filter.wait_responses(1, Duration::from_secs(5)).await);
    assert_eq!(
        tokens(&filter, bucket),
        Some(5),
        "6 reserved: 5 tokens and their refill"
    );
    assert_eq!(remaining().await, 1000 - 6 - 1);
    filter.send_raw(usage_report(bucket, 1, 2)).await;
    assert!(filter.wait_responses(2, Duration::from_secs(5)).await);
    assert_eq!(remaining().await, 1000 - 6 - 1 + 4 - 11 - 1);
}

fn usage_report(bucket: &[(&str, &str)], elapsed: i64, allowed: u64) -> RateLimitQuotaUsageReports {
    let mut report = report("edge", bucket);
    let usage = &mut report.bucket_quota_usages[0];
    usage.time_elapsed = Some(envoy_types::pb::google::protobuf::Duration {
        seconds: elapsed,
        nanos: 0,
    });
    usage.num_requests_allowed = allowed;
    report
}

/// The library's service from one YAML file of the domain `edge`, on its memory store.
fn memory_service(yaml: &str) -> RateLimitService {
    let files = [("edge.yaml", yaml)];
    let config = RlsConfig::from_yaml(files, tollgate_rls::DuplicateDomains::Refuse).unwrap();
    RateLimitService::builder().config(config).build().unwrap()
}

/// The library's service on a loopback port, and a filter connected to it.
async fn in_process(service: &RateLimitService) -> (Filter, tokio::task::JoinHandle<()>) {
    let quotas = RateLimitQuotaService::new(service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let server = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(quotas.into_server())
            .serve_with_incoming(incoming)
            .await;
    });
    let channel = Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (Filter::new(channel, "edge"), server)
}

/// A stream may hold at most `MAX_BUCKETS_PER_STREAM` buckets: a report past it ends the
/// stream with the bound named.
#[tokio::test]
async fn buckets_per_stream_are_bounded() {
    let service = memory_service(EDGE);
    let (mut filter, _server) = in_process(&service).await;
    let mut many = report("edge", &[("tenant", "0")]);
    let one = many.bucket_quota_usages[0].clone();
    for i in 1..=tollgate_rls::MAX_BUCKETS_PER_STREAM {
        let mut usage = one.clone();
        usage.bucket_id = Some(bucket_id(&[("tenant", &i.to_string())]));
        many.bucket_quota_usages.push(usage);
    }
    filter.send_raw(many).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while filter.ended().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = filter.ended().flatten().expect("an error");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("buckets per stream: 4097, over the limit of 4096"),
        "{status:?}"
    );
}

/// The server's resident memory, from `/proc`.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A client that sends reports and never reads the answers does not grow the server's
/// memory: at most two answers wait for it, newer ones are dropped (each report gets a fresh
/// one), and HTTP/2 flow control holds the rest. 2,000 reports of 100 buckets would be about
/// 20 MB of answers.
#[tokio::test]
async fn a_client_that_never_reads_does_not_grow_memory() {
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
    let runtime = runtime("rlqs_unread", EDGE);
    let rls = Rls::start(&runtime, &[]);
    let mut client = RateLimitQuotaServiceClient::new(channel(&rls).await);
    let mut big = report("edge", &[("free", "0")]);
    let one = big.bucket_quota_usages[0].clone();
    for i in 1..100 {
        let mut usage = one.clone();
        usage.bucket_id = Some(bucket_id(&[("free", &format!("{i:0>60}"))]));
        big.bucket_quota_usages.push(usage);
    }
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let _unread = client
        .stream_rate_limit_quotas(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap();
    for _ in 0..100 {
        tx.send(big.clone()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(rls.pid());
    for _ in 0..2000 {
        tx.send(big.clone()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(rls.pid());
    eprintln!("server RSS: {before} KiB, then {after} KiB");
    assert!(
        after < before + 4096,
        "grew from {before} KiB to {after} KiB"
    );
}

/// The store down: no assignment for a limited bucket (Envoy's last one expires into its
/// `expired_assignment_behavior`), unless `ON_STORE_ERROR=closed`, which assigns `DENY_ALL`.
/// Buckets without a limit are answered as ever.
#[tokio::test]
async fn the_store_down_leaves_envoy_to_its_behaviours() {
    for (on_error, limited) in [("error", None), ("closed", Some(BlanketRule::DenyAll))] {
        let redis = RedisServer::start();
        let url = redis.url();
        let runtime = runtime(&format!("rlqs_store_down_{on_error}"), EDGE);
        let rls = Rls::start(
            &runtime,
            &[("REDIS_URL", url.as_str()), ("ON_STORE_ERROR", on_error)],
        );
        drop(redis);
        let mut filter = Filter::new(channel(&rls).await, "edge");
        assert!(filter.request(&[("tenant", "down")]).await);
        assert!(filter.request(&[("free", "down")]).await);
        assert!(
            filter.wait_responses(2, Duration::from_secs(5)).await,
            "{on_error}"
        );
        assert_eq!(rule(&filter, &[("tenant", "down")]), limited, "{on_error}");
        assert!(
            tokens(&filter, &[("tenant", "down")]).is_none(),
            "{on_error}"
        );
        assert_eq!(
            rule(&filter, &[("free", "down")]),
            Some(BlanketRule::AllowAll)
        );
    }
}

/// A store that answers nothing (SIGSTOPped Redis) under load: eight streams keep being
/// answered within the store's timeout, limited buckets get no assignment (each Envoy keeps
/// its last one until it expires, then its `expired_assignment_behavior`), buckets without a
/// limit are answered as ever; once Redis answers again, the next report of every stream gets
/// a token bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_store_under_load_delays_no_stream() {
    let redis = RedisServer::start();
    let url = redis.url();
    let runtime = runtime("rlqs_store_stopped", EDGE);
    let rls = Rls::start(&runtime, &[("REDIS_URL", url.as_str())]);
    let mut filters = Vec::new();
    for i in 0..8 {
        let mut filter = Filter::new(channel(&rls).await, "edge");
        let tenant = format!("t{i}");
        assert!(filter.request(&[("tenant", &tenant)]).await);
        assert!(filter.request(&[("free", &tenant)]).await);
        assert!(filter.wait_responses(2, Duration::from_secs(5)).await);
        assert!(tokens(&filter, &[("tenant", &tenant)]).is_some(), "{i}");
        filters.push((filter, tenant));
    }

    redis.pause();
    let reported = Instant::now();
    for (filter, _) in &mut filters {
        filter.report().await;
    }
    for (filter, tenant) in &filters {
        assert!(
            filter.wait_responses(3, Duration::from_secs(2)).await,
            "{tenant}: a report answered while Redis is stopped"
        );
        let answer = filter.last_response().unwrap();
        let answered: Vec<_> = (answer.bucket_action.iter())
            .filter_map(|a| a.bucket_id.as_ref())
            .flat_map(|id| id.bucket.keys().cloned())
            .collect();
        assert_eq!(
            answered,
            ["free"],
            "{tenant}: only the bucket without a limit"
        );
    }
    eprintln!(
        "8 reports answered {:?} after Redis stopped",
        reported.elapsed()
    );

    redis.resume();
    for (filter, _) in &mut filters {
        filter.report().await;
    }
    for (filter, tenant) in &filters {
        assert!(filter.wait_responses(4, Duration::from_secs(5)).await);
        let answer = filter.last_response().unwrap();
        assert_eq!(
            answer.bucket_action.len(),
            2,
            "{tenant}: both buckets again"
        );
        assert!(tokens(filter, &[("tenant", tenant)]).is_some(), "{tenant}");
    }
}

/// A client that hangs up mid-answer (its connection closed while its first report waits on
/// a stopped Redis) frees its stream: once that answer ends, the streams gauge is back to 0,
/// and the next stream is answered as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_answer_frees_its_stream() {
    let redis = RedisServer::start();
    let url = redis.url();
    let runtime = runtime("rlqs_hang_up", EDGE);
    let env = [("REDIS_URL", url.as_str()), ("STORE_TIMEOUT", "2s")];
    let rls = Rls::start(&runtime, &env);
    let streams = || async {
        let metrics = get_text(format!("http://{}/metrics", rls.http)).await;
        let line = metrics
            .lines()
            .find(|l| l.starts_with("ratelimit_rlqs_streams{domain=\"edge\"}"))
            .map(str::to_owned);
        line.unwrap_or_default()
    };
    let wait_for = |want: &'static str| async move {
        let deadline = Instant::now() + Duration::from_secs(5);
        while streams().await != want && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(streams().await, want);
    };

    redis.pause();
    // The client on a runtime of its own: shutting it down closes its connection.
    let grpc = rls.grpc;
    let client = tokio::runtime::Runtime::new().unwrap();
    client.spawn(async move {
        let address = format!("http://{grpc}");
        let channel = Channel::from_shared(address).unwrap().connect().await;
        let mut filter = Filter::new(channel.unwrap(), "edge");
        filter.request(&[("tenant", "gone")]).await;
        std::future::pending::<()>().await;
    });
    wait_for("ratelimit_rlqs_streams{domain=\"edge\"} 1").await;
    client.shutdown_background();
    redis.resume();
    wait_for("ratelimit_rlqs_streams{domain=\"edge\"} 0").await;

    let mut filter = Filter::new(channel(&rls).await, "edge");
    assert!(filter.request(&[("tenant", "next")]).await);
    assert!(filter.wait_responses(1, Duration::from_secs(5)).await);
    assert!(tokens(&filter, &[("tenant", "next")]).is_some());
}

/// RLQS is served on the gRPC port with its TLS settings (`GRPC_SERVER_USE_TLS`), as
/// `ShouldRateLimit` is: Envoy's `rlqs_server` names the same cluster.
#[tokio::test]
async fn served_over_tls_on_the_grpc_port() {
    let runtime = runtime("rlqs_tls", EDGE);
    tollgate_test_kit::make_signed_certificate(&runtime.root);
    let (cert, key) = (runtime.root.join("cert.pem"), runtime.root.join("key.pem"));
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let rls = Rls::start(
        &runtime,
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", cert.as_str()),
            ("GRPC_SERVER_TLS_KEY", key.as_str()),
        ],
    );
    let ca = std::fs::read(runtime.root.join("ca.pem")).unwrap();
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .domain_name("127.0.0.1");
    let channel = Channel::from_shared(format!("https://{}", rls.grpc))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut filter = Filter::new(channel, "edge");
    assert!(filter.request(&[("closed", "tls")]).await);
    assert!(filter.wait_responses(1, Duration::from_secs(5)).await);
    assert_eq!(
        rule(&filter, &[("closed", "tls")]),
        Some(BlanketRule::DenyAll)
    );
}

/// With limits from an xDS control plane (`CONFIG_TYPE=GRPC_XDS_SOTW`), RLQS answers from
/// them as `ShouldRateLimit` does: before the first set loads, nothing is assigned (Envoy's
/// `no_assignment_behavior` goes on applying); once it loads, the next report gets the limit's
/// token bucket.
#[tokio::test]
async fn limits_from_xds_apply_to_rlqs() {
    use control_plane::{limit, ControlPlane, Pki};
    let pki = Pki::new("rlqs-xds");
    let cp_addr = std::net::SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let server = format!("localhost:{}", cp_addr.port());
    let (cert, key, ca) = (pki.path("rls.crt"), pki.path("rls.key"), pki.path("ca.crt"));
    let env = [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", server.as_str()),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", cert.as_str()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", key.as_str()),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ca.as_str()),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "500ms"),
    ];
    let rls = Rls::start(&Runtime::new("rlqs-xds"), &env);
    let mut filter = Filter::new(channel(&rls).await, "edge");
    let bucket: &[(&str, &str)] = &[("tenant", "xds")];
    assert!(filter.request(bucket).await);
    assert!(filter.wait_responses(1, Duration::from_secs(5)).await);
    let first = filter.last_response().unwrap();
    assert!(
        first.bucket_action.is_empty(),
        "nothing before a configuration: {first:?}"
    );

    let cp = ControlPlane::start(cp_addr, &pki);
    cp.push("1", vec![limit("edge", "tenant", 600)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokens(&filter, bucket).is_none() && Instant::now() < deadline {
        filter.report().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        tokens(&filter, bucket).is_some(),
        "the pushed limit's token bucket"
    );
}

/// When a window holds less than a stream asks for, it gets what is left, and the refused
/// ask consumes nothing: a report of 3 requests in 1 s asks for 17 of a limit of 10 and gets
/// 10; a report of none gives the 10 back, and `ShouldRateLimit` then sees 10 left. (The
/// reference's counters, a plain fixed window per hour, in process on the memory store.)
#[tokio::test]
async fn a_window_short_of_the_ask_gives_what_it_has_left() {
    let yaml = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n";
    let service = memory_service(yaml);
    let (mut filter, _server) = in_process(&service).await;
    let bucket: &[(&str, &str)] = &[("tenant", "short")];
    filter.send_raw(usage_report(bucket, 1, 3)).await;
    assert!(filter.wait_responses(1, Duration::from_secs(5)).await);
    filter.send_raw(usage_report(bucket, 5, 0)).await;
    assert!(filter.wait_responses(2, Duration::from_secs(5)).await);
    let request = support::request("edge", &[bucket]);
    let answer = service.decide(&request).await.unwrap();
    // The second report asked for 1 (idle) again after the refund of 10.
    assert_eq!(answer.statuses[0].limit_remaining, 10 - 1 - 1);
}
