//! Allow-lists over real HTTP: `[[skip]]` by client key and by network, from a rules file and
//! from the builder.

use crate::support;

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use tollgate::{key, Quota, RateLimitLayer, Skip};

async fn serve(layer: RateLimitLayer) -> SocketAddr {
    support::serve(
        Router::new()
            .route("/api", get(|| async { "api" }))
            .layer(layer),
    )
    .await
}

/// The statuses of `n` GETs of /api with `headers`.
async fn statuses(addr: SocketAddr, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        let mut request = support::client().get(format!("http://{addr}/api"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        if response.status() == 200 && headers.iter().any(|(_, v)| v.contains("internal")) {
            assert!(
                response.headers().get("ratelimit").is_none(),
                "skipped: no headers"
            );
        }
        out.push(response.status().as_u16());
    }
    out
}

#[tokio::test]
async fn skip_keys_in_the_rules_file_match_the_default_key() {
    let file = support::rules_file(
        "skip-keys",
        "[defaults]\nkey = \"header:x-api-key\"\n\n\
         [[skip]]\nkeys = [\"internal-batch\", \"internal-cron\"]\n\n\
         [[rule]]\nname = \"api\"\nquota = \"2/min\"\n",
    );
    let layer = RateLimitLayer::from_rules_file(file).unwrap();
    let addr = serve(layer).await;
    let internal = [("x-api-key", "internal-batch")];
    assert_eq!(statuses(addr, &internal, 5).await, [200; 5]);
    let cron = [("x-api-key", "internal-cron")];
    assert_eq!(statuses(addr, &cron, 5).await, [200; 5]);
    let alice = [("x-api-key", "alice")];
    assert_eq!(statuses(addr, &alice, 3).await, [200, 200, 429]);
    // A key that differs only in case is another key.
    let upper = [("x-api-key", "INTERNAL-BATCH")];
    assert_eq!(statuses(addr, &upper, 3).await, [200, 200, 429]);
}

#[tokio::test]
async fn skip_cidrs_in_the_rules_file_match_the_peer_address() {
    let skipped = support::rules_file(
        "skip-cidrs",
        "[defaults]\nkey = \"global\"\n\n[[skip]]\ncidrs = [\"127.0.0.0/8\"]\n\n\
         [[rule]]\nname = \"api\"\nquota = \"2/min\"\n",
    );
    let addr = serve(RateLimitLayer::from_rules_file(skipped).unwrap()).await;
    assert_eq!(statuses(addr, &[], 5).await, [200; 5]);

    let elsewhere = support::rules_file(
        "skip-cidrs",
        "[defaults]\nkey = \"global\"\n\n[[skip]]\ncidrs = [\"10.0.0.0/8\", \"::1/128\"]\n\n\
         [[rule]]\nname = \"api\"\nquota = \"2/min\"\n",
    );
    let addr = serve(RateLimitLayer::from_rules_file(elsewhere).unwrap()).await;
    assert_eq!(statuses(addr, &[], 3).await, [200, 200, 429]);
}

#[tokio::test]
async fn skip_cidrs_match_the_client_address_through_trusted_proxies() {
    let file = support::rules_file(
        "skip-client-cidrs",
        "[defaults]\nkey = \"client_ip\"\ntrusted_proxies = [\"127.0.0.1\"]\n\n\
         [[skip]]\npath = \"/api\"\ncidrs = [\"203.0.113.0/24\"]\n\n\
         [[rule]]\nname = \"api\"\nquota = \"2/min\"\n",
    );
    let addr = serve(RateLimitLayer::from_rules_file(file).unwrap()).await;
    let office = [("x-forwarded-for", "203.0.113.7")];
    assert_eq!(statuses(addr, &office, 5).await, [200; 5]);
    let outside = [("x-forwarded-for", "198.51.100.1")];
    assert_eq!(statuses(addr, &outside, 3).await, [200, 200, 429]);
}

#[tokio::test]
async fn the_builder_skips_by_key_and_by_network() {
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(2).unwrap())
        .key(key::Header::new("x-api-key"))
        .skip(Skip::new().keys(["internal-batch"]))
        .build()
        .unwrap();
    let addr = serve(layer).await;
    assert_eq!(
        statuses(addr, &[("x-api-key", "internal-batch")], 5).await,
        [200; 5]
    );
    assert_eq!(
        statuses(addr, &[("x-api-key", "bob")], 3).await,
        [200, 200, 429]
    );

    let by_peer = RateLimitLayer::builder()
        .quota(Quota::per_minute(2).unwrap())
        .key(key::Global)
        .skip(Skip::new().cidrs(["127.0.0.0/8".parse().unwrap()]))
        .build()
        .unwrap();
    let addr = serve(by_peer).await;
    assert_eq!(statuses(addr, &[], 5).await, [200; 5]);

    let by_client = RateLimitLayer::builder()
        .quota(Quota::per_minute(2).unwrap())
        .key(key::Global)
        .skip(Skip::new().client_cidrs(
            key::ClientIp::trusting(["127.0.0.1/32".parse().unwrap()]),
            ["203.0.113.0/24".parse().unwrap()],
        ))
        .build()
        .unwrap();
    let addr = serve(by_client).await;
    assert_eq!(
        statuses(addr, &[("x-forwarded-for", "203.0.113.9")], 5).await,
        [200; 5]
    );
    assert_eq!(
        statuses(addr, &[("x-forwarded-for", "198.51.100.9")], 3).await,
        [200, 200, 429]
    );
}

#[test]
fn an_empty_allow_list_is_a_clear_error() {
    let e = RateLimitLayer::builder()
        .quota(Quota::per_minute(2).unwrap())
        .skip(Skip::new().keys(Vec::<String>::new()))
        .build()
        .unwrap_err();
    assert_eq!(e.to_string(), "skip: no keys given; list at least one");
    let file = support::rules_file(
        "skip-empty",
        "[[skip]]\ncidrs = []\n\n[[rule]]\nname = \"api\"\nquota = \"2/min\"\n",
    );
    let e = RateLimitLayer::from_rules_file(&file)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rules.toml:2:9: skip #1: cidrs: empty list"),
        "{e}"
    );
    let file = support::rules_file(
        "skip-bad-cidr",
        "[[skip]]\ncidrs = [\"10.0.0.0/33\"]\n\n[[rule]]\nname = \"api\"\nquota = \"2/min\"\n",
    );
    let e = RateLimitLayer::from_rules_file(&file)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("skip #1: cidrs: invalid CIDR \"10.0.0.0/33\""),
        "{e}"
    );
}
