//! The layer in front of a real tonic server, called by a real tonic client over loopback:
//! RESOURCE_EXHAUSTED with a retry pushback, keys from metadata and the peer address,
//! per-method limits, streaming calls, fail-closed, and HTTP left as it was.

#![cfg(all(feature = "tonic", feature = "redis"))]

use crate::support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use tollgate::key;
use tollgate::store::{OnStoreError, RedisStore};
use tollgate::{OnMissingKey, Quota, RateLimitLayer};
use tonic::metadata::MetadataMap;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_health::server::HealthReporter;

const CHECK: &str = "/grpc.health.v1.Health/Check";

/// Serves the standard health service behind `layer` on a free loopback port.
async fn serve_grpc(layer: RateLimitLayer) -> (SocketAddr, HealthReporter) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (reporter, health) = tonic_health::server::health_reporter();
    tokio::spawn(async move {
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    (addr, reporter)
}

/// A client on a new connection, from `local` (default: the OS's choice, 127.0.0.1).
async fn connect_from(addr: SocketAddr, local: Option<IpAddr>) -> HealthClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .local_address(local)
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

async fn connect(addr: SocketAddr) -> HealthClient<Channel> {
    connect_from(addr, None).await
}

fn request(api_key: Option<&str>) -> tonic::Request<HealthCheckRequest> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    if let Some(k) = api_key {
        request
            .metadata_mut()
            .insert("x-api-key", k.parse().unwrap());
    }
    request
}

async fn check(
    client: &mut HealthClient<Channel>,
    api_key: Option<&str>,
) -> Result<tonic::Response<HealthCheckResponse>, Status> {
    client.check(request(api_key)).await
}

/// The codes of `n` unary Check calls (`Code::Ok` for a success).
async fn check_codes(
    client: &mut HealthClient<Channel>,
    n: usize,
    api_key: Option<&str>,
) -> Vec<Code> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(match check(client, api_key).await {
            Ok(response) => {
                assert_eq!(response.get_ref().status(), ServingStatus::Serving);
                Code::Ok
            }
            Err(status) => status.code(),
        });
    }
    out
}

/// The codes of `n` Watch calls as they start (`Code::Ok` when the stream opened).
async fn watch_codes(
    client: &mut HealthClient<Channel>,
    n: usize,
    api_key: Option<&str>,
) -> Vec<Code> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(match client.watch(request(api_key)).await {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        });
    }
    out
}

fn text<'a>(metadata: &'a MetadataMap, name: &str) -> &'a str {
    metadata
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {metadata:?}"))
        .to_str()
        .unwrap()
}

fn pushback_ms(status: &Status) -> u128 {
    text(status.metadata(), "grpc-retry-pushback-ms")
        .parse()
        .unwrap()
}

/// GCRA gives a slot back one emission interval (`interval_ms`) after the first call, so the
/// pushback is the interval less the time since that call, rounded up to whole milliseconds.
/// `start` is taken just before the first call.
fn assert_pushback(status: &Status, interval_ms: u128, start: Instant) {
    let elapsed_ms = start.elapsed().as_millis();
    let pushback = pushback_ms(status);
    assert!(
        (interval_ms.saturating_sub(elapsed_ms + 1)..=interval_ms).contains(&pushback),
        "pushback {pushback} ms, {elapsed_ms} ms after the first call, interval {interval_ms} ms"
    );
}

fn api_key_layer(quota: Quota) -> RateLimitLayer {
    RateLimitLayer::builder()
        .quota(quota)
        .key(key::Header::new("x-api-key"))
        .build()
        .unwrap()
}

const OK: Code = Code::Ok;
const EXHAUSTED: Code = Code::ResourceExhausted;

#[tokio::test]
async fn unary_calls_get_resource_exhausted_with_pushback_after_the_quota() {
    let (addr, _reporter) = serve_grpc(api_key_layer(Quota::per_minute(3).unwrap())).await;
    let mut client = connect(addr).await;
    let start = Instant::now();

    let first = check(&mut client, Some("k")).await.unwrap();
    assert_eq!(first.get_ref().status(), ServingStatus::Serving);
    // Allowed calls carry the rate-limit headers as response metadata.
    assert_eq!(
        text(first.metadata(), "ratelimit-policy"),
        "\"default\";q=3;w=60"
    );
    assert_eq!(text(first.metadata(), "ratelimit"), "\"default\";r=2;t=20");
    assert_eq!(check_codes(&mut client, 2, Some("k")).await, [OK, OK]);

    let denied = check(&mut client, Some("k")).await.unwrap_err();
    assert_eq!(denied.code(), EXHAUSTED);
    assert_eq!(
        denied.message(),
        "Too Many Requests: rate limit exceeded, retry in 20 s"
    );
    // GCRA 3/min: one call back every 20 s, counted from the first call.
    assert_pushback(&denied, 20_000, start);
    let pushback = pushback_ms(&denied);
    let metadata = denied.metadata();
    assert_eq!(text(metadata, "retry-after"), "20");
    assert_eq!(text(metadata, "ratelimit-policy"), "\"default\";q=3;w=60");
    assert_eq!(text(metadata, "ratelimit"), "\"default\";r=0;t=60");
    assert_eq!(text(metadata, "content-type"), "application/grpc");

    // Denied calls spend nothing: the next one is denied with a pushback no longer.
    let again = check(&mut client, Some("k")).await.unwrap_err();
    assert_eq!(again.code(), EXHAUSTED);
    assert!(pushback_ms(&again) <= pushback);
}

#[tokio::test]
async fn other_api_keys_and_the_peer_fallback_are_unaffected() {
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(2).unwrap())
        .key(key::Header::new("x-api-key").or(key::PeerIp::default()))
        .build()
        .unwrap();
    let (addr, _reporter) = serve_grpc(layer).await;
    let mut client = connect(addr).await;

    assert_eq!(
        check_codes(&mut client, 3, Some("a")).await,
        [OK, OK, EXHAUSTED]
    );
    assert_eq!(
        check_codes(&mut client, 3, Some("b")).await,
        [OK, OK, EXHAUSTED]
    );
    // No metadata: keyed by the peer address, a bucket of its own.
    assert_eq!(check_codes(&mut client, 3, None).await, [OK, OK, EXHAUSTED]);
    assert_eq!(check_codes(&mut client, 1, Some("a")).await, [EXHAUSTED]);
    assert_eq!(check_codes(&mut client, 2, Some("c")).await, [OK, OK]);
}

#[tokio::test]
async fn keyed_by_peer_ip_without_any_interceptor() {
    let (addr, _reporter) = serve_grpc(RateLimitLayer::new(
        Quota::per_minute(2).unwrap(),
        key::PeerIp::default(),
    ))
    .await;
    let mut client = connect(addr).await;
    assert_eq!(check_codes(&mut client, 3, None).await, [OK, OK, EXHAUSTED]);

    // The bucket is the address, not the connection: a new connection is still limited.
    let mut reconnected = connect(addr).await;
    assert_eq!(check_codes(&mut reconnected, 1, None).await, [EXHAUSTED]);
    // Metadata does not matter to this key.
    assert_eq!(
        check_codes(&mut reconnected, 1, Some("x")).await,
        [EXHAUSTED]
    );

    // Another loopback address is another client. Linux answers on all of 127.0.0.0/8; other
    // systems (macOS) only on 127.0.0.1 unless configured, so this part needs 127.0.0.2.
    let other = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    if std::net::TcpListener::bind((other, 0)).is_err() {
        eprintln!("127.0.0.2 is not a local address here: second-peer check skipped");
        return;
    }
    let mut elsewhere = connect_from(addr, Some(other)).await;
    assert_eq!(
        check_codes(&mut elsewhere, 3, None).await,
        [OK, OK, EXHAUSTED]
    );
}

#[tokio::test]
async fn server_streaming_call_is_limited_when_it_starts() {
    let (addr, reporter) = serve_grpc(api_key_layer(Quota::per_minute(2).unwrap())).await;
    let mut client = connect(addr).await;
    let start = Instant::now();

    let mut open = client.watch(request(Some("w"))).await.unwrap().into_inner();
    let first = open.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);
    assert_eq!(watch_codes(&mut client, 1, Some("w")).await, [OK]);

    // The quota is spent: the call itself fails, before any message.
    let denied = client.watch(request(Some("w"))).await.unwrap_err();
    assert_eq!(denied.code(), EXHAUSTED);
    assert_pushback(&denied, 30_000, start);
    // Unary calls share the key's budget.
    assert_eq!(check_codes(&mut client, 1, Some("w")).await, [EXHAUSTED]);
    // Other keys still start streams.
    assert_eq!(watch_codes(&mut client, 2, Some("v")).await, [OK, OK]);

    // A stream admitted earlier is not cut off: the limit applies to calls, not messages.
    reporter
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    let update = tokio::time::timeout(Duration::from_secs(5), open.message())
        .await
        .expect("the open stream gets the update")
        .unwrap()
        .unwrap();
    assert_eq!(update.status(), ServingStatus::NotServing);
}

#[tokio::test]
async fn per_method_limit_with_a_closure_key() {
    // Only Check is limited (per API key); every other method has no key and is skipped.
    let only_check = key::from_fn(|req| {
        if req.uri.path() != CHECK {
            return None;
        }
        let api_key = req.headers.get("x-api-key")?.to_str().ok()?;
        Some(api_key.to_owned())
    })
    .with_description("the x-api-key metadata on Check");
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(2).unwrap())
        .key(only_check)
        .on_missing_key(OnMissingKey::Skip)
        .build()
        .unwrap();
    let (addr, _reporter) = serve_grpc(layer).await;
    let mut client = connect(addr).await;

    assert_eq!(
        check_codes(&mut client, 3, Some("m")).await,
        [OK, OK, EXHAUSTED]
    );
    assert_eq!(watch_codes(&mut client, 5, Some("m")).await, [OK; 5]);
    let watch = client.watch(request(Some("m"))).await.unwrap();
    assert!(watch.metadata().get("ratelimit").is_none());
}

#[tokio::test]
async fn per_method_budgets_with_the_path_key() {
    // One budget per method and API key: /grpc.health.v1.Health/Check and .../Watch apart.
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(2).unwrap())
        .key((key::Path, key::Header::new("x-api-key")))
        .build()
        .unwrap();
    let (addr, _reporter) = serve_grpc(layer).await;
    let mut client = connect(addr).await;

    assert_eq!(
        check_codes(&mut client, 3, Some("p")).await,
        [OK, OK, EXHAUSTED]
    );
    assert_eq!(
        watch_codes(&mut client, 3, Some("p")).await,
        [OK, OK, EXHAUSTED]
    );
    assert_eq!(
        check_codes(&mut client, 3, Some("q")).await,
        [OK, OK, EXHAUSTED]
    );
}

#[tokio::test]
async fn missing_key_is_invalid_argument() {
    let (addr, _reporter) = serve_grpc(api_key_layer(Quota::per_minute(2).unwrap())).await;
    let mut client = connect(addr).await;
    let status = check(&mut client, None).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "Bad Request: no client key for rate limiting: expected the x-api-key header"
    );
}

#[tokio::test]
async fn unreachable_redis_with_deny_gives_unavailable() {
    let redis = support::RedisServer::not_started();
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(100).unwrap())
        .key(key::Header::new("x-api-key"))
        .store(RedisStore::from_url(&redis.url()).unwrap())
        .on_store_error(OnStoreError::Deny)
        .build()
        .unwrap();
    let (addr, _reporter) = serve_grpc(layer).await;
    let mut client = connect(addr).await;

    let status = check(&mut client, Some("k")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(pushback_ms(&status), 1_000);
    assert_eq!(text(status.metadata(), "retry-after"), "1");
    assert!(status.message().contains("rate limiter cannot decide"));
}

#[tokio::test]
async fn redis_store_shares_the_limit_between_two_grpc_servers() {
    let url = support::shared_redis_url();
    let prefix = support::unique_prefix("grpc");
    let layer = || {
        let store = RedisStore::from_url(&url).unwrap().prefix(prefix.clone());
        RateLimitLayer::builder()
            .quota(Quota::per_minute(3).unwrap())
            .key(key::Header::new("x-api-key"))
            .store(store)
            // Fail closed and wait long enough: a Redis problem must not pass as an OK.
            .on_store_error(OnStoreError::Deny)
            .store_timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let (a, _ra) = serve_grpc(layer()).await;
    let (b, _rb) = serve_grpc(layer()).await;
    let (mut a, mut b) = (connect(a).await, connect(b).await);
    let start = Instant::now();

    assert_eq!(check_codes(&mut a, 2, Some("r")).await, [OK, OK]);
    assert_eq!(check_codes(&mut b, 2, Some("r")).await, [OK, EXHAUSTED]);
    let denied = check(&mut a, Some("r")).await.unwrap_err();
    assert_eq!(denied.code(), EXHAUSTED);
    assert_pushback(&denied, 20_000, start);
}

#[tokio::test]
async fn the_same_layer_still_answers_http_with_a_plain_429() {
    let layer = api_key_layer(Quota::per_minute(2).unwrap());
    let (grpc, _reporter) = serve_grpc(layer.clone()).await;
    let http = support::serve(
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer),
    )
    .await;
    let url = format!("http://{http}/");
    let web = support::client();
    let get = |k: &'static str| web.get(&url).header("x-api-key", k).send();

    assert_eq!(get("h").await.unwrap().status(), 200);
    assert_eq!(get("h").await.unwrap().status(), 200);
    let denied = get("h").await.unwrap();
    assert_eq!(denied.status(), 429);
    assert_eq!(denied.headers()["retry-after"], "30");
    assert_eq!(
        denied.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    assert!(denied.headers().get("grpc-status").is_none());
    assert!(denied.headers().get("grpc-retry-pushback-ms").is_none());
    assert_eq!(
        denied.text().await.unwrap(),
        "Too Many Requests: rate limit exceeded, retry in 30 s\n"
    );

    // One layer, one limiter: the key's budget is shared by both protocols.
    let mut client = connect(grpc).await;
    assert_eq!(check_codes(&mut client, 1, Some("h")).await, [EXHAUSTED]);
    assert_eq!(
        check_codes(&mut client, 3, Some("g")).await,
        [OK, OK, EXHAUSTED]
    );
    assert_eq!(get("g").await.unwrap().status(), 429);
}
