//! The built `tollgate-rls` answering as the reference (envoyproxy/ratelimit) does for the
//! same files, environment and requests, each case checked against the reference's code.

mod support;

use support::{http, Rls, Runtime};

const ONE_LIMIT: &str = "domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 2 }
";

/// The reference registers `/json` with `HandleFunc` and no method
/// (`src/server/server_impl.go`, `AddJsonHandler`): any method decides, and the status is
/// 200, or 429 when the overall code is OVER_LIMIT.
#[tokio::test]
async fn json_answers_on_any_method() {
    let runtime = Runtime::new("json-methods");
    runtime.write("edge.yaml", ONE_LIMIT);
    let rls = Rls::start(&runtime, &[]);
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#;
    let url = format!("http://{}/json", rls.http);
    let mut statuses = Vec::new();
    for method in [
        reqwest::Method::GET,
        reqwest::Method::PUT,
        reqwest::Method::POST,
    ] {
        let answer = http()
            .request(method, &url)
            .body(body)
            .send()
            .await
            .unwrap();
        statuses.push(answer.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429]);
}
