//! The bounds on one request to `tollgate_rls::RateLimitService` (`MAX_DESCRIPTORS` and the
//! others), over a real tonic server and client on loopback and through `decide_json`: each
//! bound accepted exactly and refused one past it with `INVALID_ARGUMENT` (or 400) naming it,
//! a huge request refused at once by its size, and on Redis no script call for a refused request and one
//! call of at most `MAX_DESCRIPTORS` checks for the largest accepted one.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tollgate::store::Store;
use tollgate::store::{MemoryStore, RedisStore};
use tollgate_rls::proto::rate_limit_descriptor::Entry;
use tollgate_rls::proto::rate_limit_response::Code;
use tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::proto::{RateLimitDescriptor, RateLimitRequest};
use tollgate_rls::{
    RateLimitService, RlsConfig, MAX_DESCRIPTORS, MAX_DOMAIN_BYTES, MAX_ENTRIES, MAX_KEY_BYTES,
    MAX_REQUEST_BYTES, MAX_VALUE_BYTES,
};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::Code as GrpcCode;

type Client = RateLimitServiceClient<Channel>;

/// A limit on `k` whatever its value, in the domain `limits`.
const LIMITS: &str = "
domain: limits
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 1000 }
";

fn service(store: impl Store) -> RateLimitService {
    let config = RlsConfig::from_yaml(
        [("limits.yaml", LIMITS)],
        tollgate_rls::DuplicateDomains::Refuse,
    )
    .unwrap();
    RateLimitService::builder()
        .config(config)
        .store(store)
        .store_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// Serves `service` on a free loopback port and connects a client to it.
async fn serve(service: RateLimitService) -> Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// `count` descriptors `k=<prefix><i>`, each with `entries` entries (the first one `k`).
fn request(prefix: &str, count: usize, entries: usize) -> RateLimitRequest {
    let descriptor = |i: usize| RateLimitDescriptor {
        entries: (0..entries)
            .map(|e| Entry {
                key: if e == 0 { "k".into() } else { format!("e{e}") },
                value: format!("{prefix}{i}"),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    };
    RateLimitRequest {
        domain: "limits".into(),
        descriptors: (0..count).map(descriptor).collect(),
        hits_addend: 0,
    }
}

/// The refusal of `request`: its code must be `INVALID_ARGUMENT`; its message.
async fn refused(client: &mut Client, request: RateLimitRequest) -> String {
    let status = client.should_rate_limit(request).await.unwrap_err();
    assert_eq!(status.code(), GrpcCode::InvalidArgument, "{status:?}");
    status.message().to_owned()
}

async fn accepted(client: &mut Client, request: RateLimitRequest) -> Vec<bool> {
    let response = (client.should_rate_limit(request).await)
        .unwrap_or_else(|e| panic!("refused: {e:?}"))
        .into_inner();
    assert_eq!(response.overall_code, Code::Ok as i32);
    (response.statuses.iter())
        .map(|s| s.current_limit.is_some())
        .collect()
}

#[tokio::test]
async fn each_bound_is_accepted_exactly_and_refused_one_past_it_naming_it() {
    assert_eq!(
        (MAX_DESCRIPTORS, MAX_ENTRIES),
        (64, 32),
        "the documented figures (docs/envoy.md, Limits)"
    );
    assert_eq!(
        (
            MAX_REQUEST_BYTES,
            MAX_DOMAIN_BYTES,
            MAX_KEY_BYTES,
            MAX_VALUE_BYTES
        ),
        (262_144, 256, 256, 4096)
    );
    let mut client = serve(service(MemoryStore::new())).await;

    // Descriptors per request: every one of the 64 is decided.
    let limited = accepted(&mut client, request("a", MAX_DESCRIPTORS, 1)).await;
    assert_eq!(limited, vec![true; MAX_DESCRIPTORS]);
    assert_eq!(
        refused(&mut client, request("a", MAX_DESCRIPTORS + 1, 1)).await,
        "descriptors per request: 65, over the limit of 64"
    );

    // Entries per descriptor (deeper than the configuration: no limit, but accepted).
    accepted(&mut client, request("b", 2, MAX_ENTRIES)).await;
    let mut r = request("b", 2, MAX_ENTRIES);
    r.descriptors[1].entries.push(Entry::default());
    assert_eq!(
        refused(&mut client, r).await,
        "entries in descriptor 1: 33, over the limit of 32"
    );

    // The domain's bytes (an unknown domain is answered OK, as in the reference).
    let mut r = request("c", 1, 1);
    r.domain = "d".repeat(MAX_DOMAIN_BYTES);
    accepted(&mut client, r.clone()).await;
    r.domain.push('d');
    assert_eq!(
        refused(&mut client, r).await,
        "bytes in the domain: 257, over the limit of 256"
    );

    // A key's and a value's bytes.
    let mut r = request("d", 3, 2);
    r.descriptors[2].entries[1].key = "x".repeat(MAX_KEY_BYTES);
    r.descriptors[2].entries[0].value = "é".repeat(MAX_VALUE_BYTES / 2);
    accepted(&mut client, r.clone()).await;
    r.descriptors[2].entries[0].value.push('v');
    assert_eq!(
        refused(&mut client, r.clone()).await,
        "bytes in the value of descriptor 2, entry 0: 4097, over the limit of 4096"
    );
    r.descriptors[2].entries[0].value.pop();
    r.descriptors[2].entries[1].key.push('x');
    assert_eq!(
        refused(&mut client, r).await,
        "bytes in the key of descriptor 2, entry 1: 257, over the limit of 256"
    );

    // A refused request consumed nothing: the first accepted request counted 1 of 1000.
    let r = client
        .should_rate_limit(request("a", 1, 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.statuses[0].limit_remaining, 998);
}

#[tokio::test]
async fn a_large_request_is_refused_by_its_count_and_a_huge_one_by_its_size_at_once() {
    let mut client = serve(service(MemoryStore::new())).await;
    // 16,000 descriptors in about 250 KB: under MAX_REQUEST_BYTES (and tonic's 4 MiB), so the
    // service's own check refuses it.
    let large = request("v", 16_000, 1);
    assert_eq!(
        refused(&mut client, large).await,
        "descriptors per request: 16000, over the limit of 64"
    );
    // 200,000 descriptors in about 3.2 MB: refused by tonic from the message's length,
    // unread. (How soon is timed on the binary, whose client encodes it beforehand: here the
    // client's encoding, unoptimized, would be most of the time.)
    let huge = request("v", 200_000, 1);
    let status = client.should_rate_limit(huge).await.unwrap_err();
    assert_eq!(status.code(), GrpcCode::OutOfRange, "{status:?}");
    assert!(
        status.message().ends_with("the limit is: 262144 bytes"),
        "{status:?}"
    );
}

#[tokio::test]
async fn json_is_bounded_by_its_size_before_parsing_and_its_descriptors_before_matching() {
    let service = service(MemoryStore::new());
    let body = |count: usize| {
        let one = r#"{"entries":[{"key":"k","value":"j"}]}"#;
        format!(
            r#"{{"domain":"limits","descriptors":[{}]}}"#,
            vec![one; count].join(",")
        )
    };
    assert_eq!(
        service
            .decide_json(body(MAX_DESCRIPTORS).as_bytes())
            .await
            .status,
        200
    );
    let over = service
        .decide_json(body(MAX_DESCRIPTORS + 1).as_bytes())
        .await;
    assert_eq!(
        (over.status, over.body.as_str()),
        (
            400,
            "Bad Request: descriptors per request: 65, over the limit of 64\n"
        )
    );
    let entries = (0..=MAX_ENTRIES)
        .map(|e| format!(r#"{{"key":"e{e}","value":"v"}}"#))
        .collect::<Vec<_>>()
        .join(",");
    let deep = format!(r#"{{"domain":"limits","descriptors":[{{"entries":[{entries}]}}]}}"#);
    let over = service.decide_json(deep.as_bytes()).await;
    assert_eq!(
        (over.status, over.body.as_str()),
        (
            400,
            "Bad Request: entries in descriptor 0: 33, over the limit of 32\n"
        )
    );
    let long = format!(
        r#"{{"domain":"limits","descriptors":[{{"entries":[{{"key":"k","value":"{}"}}]}}]}}"#,
        "v".repeat(MAX_VALUE_BYTES + 1)
    );
    let over = service.decide_json(long.as_bytes()).await;
    assert_eq!(
        (over.status, over.body.as_str()),
        (
            400,
            "Bad Request: bytes in the value of descriptor 0, entry 0: 4097, over the limit of 4096\n"
        )
    );

    // A body of exactly MAX_REQUEST_BYTES is read (and refused for its descriptors); one
    // byte more is refused before it is parsed.
    let mut full = body(6_000);
    full.insert_str(full.len() - 1, &" ".repeat(MAX_REQUEST_BYTES - full.len()));
    let answer = service.decide_json(full.as_bytes()).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (
            400,
            "Bad Request: descriptors per request: 6000, over the limit of 64\n"
        )
    );
    full.insert(full.len() - 1, ' ');
    let answer = service.decide_json(full.as_bytes()).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (
            400,
            "Bad Request: bytes in the request: 262145, over the limit of 262144\n"
        )
    );

    let huge = body(45_000);
    let started = Instant::now();
    let answer = service.decide_json(huge.as_bytes()).await;
    let took = started.elapsed();
    let expected = format!(
        "Bad Request: bytes in the request: {}, over the limit of 262144\n",
        huge.len()
    );
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (400, expected.as_str())
    );
    assert!(took < Duration::from_secs(1), "answered in {took:?}");
}

#[tokio::test]
async fn on_redis_a_refused_request_makes_no_call_and_the_largest_accepted_one_call() {
    let redis = support::RedisServer::start();
    let store = RedisStore::from_url(&redis.url()).unwrap();
    let mut client = serve(service(store)).await;
    // The script is loaded once (NOSCRIPT, then the script): not part of the count.
    accepted(&mut client, request("warm", 2, 1)).await;
    support::redis_cli(redis.port, &["CONFIG", "RESETSTAT"]);

    let limited = accepted(&mut client, request("r", MAX_DESCRIPTORS, 1)).await;
    assert_eq!(limited, vec![true; MAX_DESCRIPTORS]);
    refused(&mut client, request("r", MAX_DESCRIPTORS + 1, 1)).await;
    refused(&mut client, request("r", 10_000, 1)).await;

    let mut conn = support::redis_connection(&redis.url());
    let mut calls = |command: &str| support::command_calls(&mut conn, command);
    assert_eq!((calls("evalsha"), calls("eval")), (1, 0));
}
