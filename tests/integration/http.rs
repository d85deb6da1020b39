//! The layer over real HTTP on loopback: statuses, headers, keys, hostile input.

use crate::support;

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use reqwest::StatusCode;
use tollgate::key::{self, KeyExtractor};
use tollgate::rules::Rule;
use tollgate::{Algorithm, HeaderStyle, OnMissingKey, Quota, RateLimitLayer};

fn routes() -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/other", get(|| async { "other" }))
}

async fn statuses(url: &str, n: usize, api_key: Option<&str>) -> Vec<u16> {
    let client = support::client();
    let mut out = Vec::new();
    for _ in 0..n {
        let mut req = client.get(url);
        if let Some(k) = api_key {
            req = req.header("x-api-key", k);
        }
        out.push(req.send().await.unwrap().status().as_u16());
    }
    out
}

#[tokio::test]
async fn denies_after_the_quota_with_retry_after_and_ietf_headers() {
    let layer = RateLimitLayer::new(Quota::per_minute(3).unwrap(), key::PeerIp::default());
    let addr = support::serve(routes().layer(layer)).await;
    let client = support::client();
    let url = format!("http://{addr}/");

    let first = client.get(&url).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["ratelimit-policy"], "\"default\";q=3;w=60");
    assert_eq!(first.headers()["ratelimit"], "\"default\";r=2;t=20");
    assert_eq!(first.text().await.unwrap(), "hello");

    assert_eq!(statuses(&url, 2, None).await, [200, 200]);
    let denied = client.get(&url).send().await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // GCRA 3/min: one request back every 20 s.
    assert_eq!(denied.headers()["retry-after"], "20");
    assert_eq!(denied.headers()["ratelimit"], "\"default\";r=0;t=60");
    assert_eq!(
        denied.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    assert!(denied.text().await.unwrap().contains("retry in 20 s"));
}

#[tokio::test]
async fn legacy_and_both_header_styles() {
    for (style, ietf, legacy) in [
        (HeaderStyle::Legacy, false, true),
        (HeaderStyle::Both, true, true),
        (HeaderStyle::None, false, false),
    ] {
        let layer = RateLimitLayer::builder()
            .quota(Quota::per_second(2).unwrap())
            .algorithm(Algorithm::FixedWindow)
            .key(key::Global)
            .headers(style)
            .build()
            .unwrap();
        let addr = support::serve(routes().layer(layer)).await;
        let r = support::client()
            .get(format!("http://{addr}/"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers().contains_key("ratelimit"), ietf, "{style:?}");
        assert_eq!(
            r.headers().contains_key("x-ratelimit-limit"),
            legacy,
            "{style:?}"
        );
        if legacy {
            assert_eq!(r.headers()["x-ratelimit-limit"], "2");
            assert_eq!(r.headers()["x-ratelimit-remaining"], "1");
            assert_eq!(r.headers()["x-ratelimit-reset"], "1");
        }
    }
}

#[tokio::test]
async fn keys_are_isolated() {
    let layer = RateLimitLayer::new(Quota::per_minute(2).unwrap(), key::Header::new("x-api-key"));
    let addr = support::serve(routes().layer(layer)).await;
    let url = format!("http://{addr}/");
    assert_eq!(statuses(&url, 3, Some("alice")).await, [200, 200, 429]);
    assert_eq!(statuses(&url, 3, Some("bob")).await, [200, 200, 429]);
    assert_eq!(statuses(&url, 1, Some("alice")).await, [429]);
}

/// README's remedy for unchecked header keys: a validated key or the IP, and a per-IP rule.
#[tokio::test]
async fn random_api_keys_get_no_fresh_buckets_with_validated_keys_and_a_per_ip_rule() {
    let random_keys = |n: usize| (0..n).map(|i| format!("random-{i}")).collect::<Vec<_>>();
    async fn send(url: &str, keys: &[String]) -> Vec<u16> {
        let client = support::client();
        let mut out = Vec::new();
        for k in keys {
            let r = client.get(url).header("x-api-key", k).send().await.unwrap();
            out.push(r.status().as_u16());
        }
        out
    }

    // Unchecked: every random key is a fresh bucket, so nothing is ever denied.
    let layer = RateLimitLayer::new(Quota::per_minute(3).unwrap(), key::Header::new("x-api-key"));
    let addr = support::serve(routes().layer(layer)).await;
    assert_eq!(
        send(&format!("http://{addr}/"), &random_keys(10)).await,
        [200; 10]
    );

    let issued = ["k-alice".to_owned()];
    let api_key = key::from_fn(move |req| {
        let key = req.headers.get("x-api-key")?.to_str().ok()?;
        issued.iter().any(|k| k == key).then(|| key.to_owned())
    });
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::new("per-key", Quota::per_minute(3).unwrap())
                .key(api_key.or(key::PeerIp::default())),
        )
        .rule(Rule::new("per-ip", Quota::per_minute(5).unwrap()).key(key::PeerIp::default()))
        .build()
        .unwrap();
    let addr = support::serve(routes().layer(layer)).await;
    let url = format!("http://{addr}/");
    // Unknown keys share the IP's bucket of the per-key rule: 3 pass.
    let mut expected = vec![429; 10];
    expected[..3].fill(200);
    assert_eq!(send(&url, &random_keys(10)).await, expected);
    // The issued key has its own bucket, but the per-IP rule has 2 left for this address.
    let alice = vec!["k-alice".to_owned(); 3];
    assert_eq!(send(&url, &alice).await, [200, 200, 429]);
}

#[tokio::test]
async fn missing_key_is_a_400_naming_the_header_or_skipped_or_shared() {
    let layer = RateLimitLayer::new(Quota::per_minute(1).unwrap(), key::Header::new("x-api-key"));
    let addr = support::serve(routes().layer(layer)).await;
    let r = support::client()
        .get(format!("http://{addr}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("x-api-key"));

    for (mode, expected) in [
        (OnMissingKey::Skip, [200, 200, 200]),
        (OnMissingKey::Shared, [200, 429, 429]),
    ] {
        let layer = RateLimitLayer::builder()
            .quota(Quota::per_minute(1).unwrap())
            .key(key::Header::new("x-api-key"))
            .on_missing_key(mode)
            .build()
            .unwrap();
        let addr = support::serve(routes().layer(layer)).await;
        assert_eq!(
            statuses(&format!("http://{addr}/"), 3, None).await,
            expected
        );
    }
}

#[tokio::test]
async fn the_header_key_falls_back_to_the_peer_ip() {
    let layer = RateLimitLayer::new(
        Quota::per_minute(1).unwrap(),
        key::Header::new("x-api-key").or(key::PeerIp::default()),
    );
    let addr = support::serve(routes().layer(layer)).await;
    let url = format!("http://{addr}/");
    assert_eq!(statuses(&url, 2, None).await, [200, 429]);
    // A key that spells the peer IP does not share the peer IP's bucket.
    assert_eq!(statuses(&url, 2, Some("127.0.0.1")).await, [200, 429]);
}

#[tokio::test]
async fn route_layer_limits_one_route_only() {
    let limited = Router::new()
        .route("/", get(|| async { "hello" }))
        .route_layer(RateLimitLayer::new(
            Quota::per_minute(1).unwrap(),
            key::Global,
        ));
    let app = limited.route("/other", get(|| async { "other" }));
    let addr = support::serve(app).await;
    assert_eq!(
        statuses(&format!("http://{addr}/"), 2, None).await,
        [200, 429]
    );
    assert_eq!(
        statuses(&format!("http://{addr}/other"), 3, None).await,
        [200, 200, 200]
    );
}

#[tokio::test]
async fn hostile_headers_never_cause_a_5xx() {
    let trusted = ["127.0.0.0/8".parse().unwrap()];
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(1000).unwrap())
        .key(key::Header::new("x-api-key").or(key::ClientIp::trusting(trusted)))
        .build()
        .unwrap();
    let addr = support::serve(routes().layer(layer)).await;
    let client = support::client();
    let url = format!("http://{addr}/");
    let long = "k".repeat(8 * 1024);
    let hostile: Vec<(&str, Vec<u8>)> = vec![
        ("x-api-key", long.clone().into_bytes()),
        ("x-api-key", b"{tag}}{".to_vec()),
        ("x-api-key", b"a\tb\x7f\x01c".to_vec()),
        ("x-api-key", "\u{e9}t\u{e9}".as_bytes().to_vec()),
        ("x-api-key", vec![0xff, 0xfe, 0x80]),
        ("forwarded", b"for=\"[::1\";;;,,for=".to_vec()),
        (
            "forwarded",
            b"for=\"[2001:db8::1]:99999\", for=_hidden, for=unknown".to_vec(),
        ),
        ("x-forwarded-for", b",,, 1.2.3.999, [::1, garbage".to_vec()),
        ("x-forwarded-for", long.clone().into_bytes()),
        ("x-real-ip", b"not an ip".to_vec()),
    ];
    for (name, value) in hostile {
        let status = raw_status(addr, name, &value).await;
        // hyper itself may refuse bytes HTTP forbids (400); the limiter must never 5xx.
        assert!(
            status == 200 || status == 400,
            "{name}: got {status} for a hostile header"
        );
    }
    // The limiter still works after all that.
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
}

/// Sends one HTTP/1.1 request with a raw header (any bytes) and returns the status code.
async fn raw_status(addr: std::net::SocketAddr, name: &str, value: &[u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request =
        format!("GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n{name}: ").into_bytes();
    request.extend_from_slice(value);
    request.extend_from_slice(b"\r\n\r\n");
    stream.write_all(&request).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let status_line = String::from_utf8_lossy(&response);
    status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {status_line:?}"))
}

#[tokio::test]
async fn spoofed_forwarded_for_is_ignored_unless_the_peer_is_trusted() {
    let client = support::client();
    // Nobody trusted: the peer IP is the key, whatever X-Forwarded-For says.
    let layer = RateLimitLayer::new(Quota::per_minute(1).unwrap(), key::ClientIp::default());
    let addr = support::serve(routes().layer(layer)).await;
    let url = format!("http://{addr}/");
    for (i, expected) in [200, 429, 429].into_iter().enumerate() {
        let r = client
            .get(&url)
            .header("x-forwarded-for", format!("203.0.113.{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), expected);
    }
    // The loopback peer trusted as a proxy: the rightmost untrusted address is the client.
    let layer = RateLimitLayer::new(
        Quota::per_minute(1).unwrap(),
        key::ClientIp::trusting(["127.0.0.0/8".parse().unwrap()]),
    );
    let addr = support::serve(routes().layer(layer)).await;
    let url = format!("http://{addr}/");
    let send = |xff: &'static str| client.get(&url).header("x-forwarded-for", xff).send();
    assert_eq!(send("198.51.100.7").await.unwrap().status(), 200);
    // Same client behind a spoofed leftmost entry: still the same key.
    assert_eq!(send("6.6.6.6, 198.51.100.7").await.unwrap().status(), 429);
    assert_eq!(send("198.51.100.8").await.unwrap().status(), 200);
}

#[tokio::test]
async fn every_algorithm_allows_exactly_the_limit_over_http() {
    for algorithm in Algorithm::ALL {
        let layer = RateLimitLayer::builder()
            .quota(Quota::per_minute(4).unwrap())
            .algorithm(algorithm)
            .key(key::Global)
            .build()
            .unwrap();
        let addr = support::serve(routes().layer(layer)).await;
        assert_eq!(
            statuses(&format!("http://{addr}/"), 6, None).await,
            [200, 200, 200, 200, 429, 429],
            "{algorithm}"
        );
    }
}

#[tokio::test]
async fn a_custom_denial_response_keeps_the_rate_limit_headers() {
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(1).unwrap())
        .key(key::Global)
        .deny_response(|decision| {
            let secs = decision.retry_after.unwrap_or(Duration::ZERO).as_secs();
            let mut r = http::Response::new(format!("{{\"retry_in\":{secs}}}"));
            *r.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
            r.headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            r
        })
        .build()
        .unwrap();
    let addr = support::serve(routes().layer(layer)).await;
    let url = format!("http://{addr}/");
    let client = support::client();
    client.get(&url).send().await.unwrap();
    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.headers()["ratelimit"], "\"default\";r=0;t=60");
    assert_eq!(r.text().await.unwrap(), "{\"retry_in\":59}");
}
