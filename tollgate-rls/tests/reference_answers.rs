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

const WITH_METADATA: &str = "domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1 }
    metadata: { tier: free, weights: { user: 1 } }
  - key: path
    rate_limit: { unit: hour, requests_per_unit: 100 }
    metadata: { tier: paid, route: /api, weights: { path: 2 } }
";

/// `RESPONSE_DYNAMIC_METADATA=true`: the reference's `ratelimitToMetadata`
/// (`src/service/ratelimit.go`) sends the domain, each descriptor's entries as `key=value`,
/// the request's `hitsAddend` when set, and the merged YAML `metadata` of the limits the
/// request passed (the first value of a key stays; structs merge: `mergeMetadata`). A limit
/// that is over adds nothing.
#[tokio::test]
async fn dynamic_metadata_as_the_reference_sends_it() {
    let runtime = Runtime::new("metadata");
    runtime.write("edge.yaml", WITH_METADATA);
    let rls = Rls::start(&runtime, &[("RESPONSE_DYNAMIC_METADATA", "true")]);
    let url = format!("http://{}/json", rls.http);
    let body = r#"{"domain":"edge","hitsAddend":1,"descriptors":[
        {"entries":[{"key":"user","value":"a"}]},{"entries":[{"key":"path","value":"/x"}]}]}"#;
    let answer = |body: &'static str| {
        let url = url.clone();
        async move {
            let r = http().post(url).body(body).send().await.unwrap();
            let json: serde_json::Value =
                serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
            json["dynamicMetadata"].clone()
        }
    };
    let first = answer(body).await;
    assert_eq!(
        first,
        serde_json::json!({
            "domain": "edge",
            "hitsAddend": 1.0,
            "descriptors": [{"entries": ["user=a"]}, {"entries": ["path=/x"]}],
            "metadata": {"tier": "free", "route": "/api", "weights": {"user": 1.0, "path": 2.0}},
        })
    );
    // The user limit (1 an hour) is now over: only the path limit's metadata.
    let second = answer(body).await;
    assert_eq!(
        second["metadata"],
        serde_json::json!({"tier": "paid", "route": "/api", "weights": {"path": 2.0}})
    );

    // Without the setting, none.
    drop(rls);
    let rls = Rls::start(&runtime, &[]);
    let r = http()
        .post(format!("http://{}/json", rls.http))
        .body(body)
        .send()
        .await
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert!(json.get("dynamicMetadata").is_none(), "{json}");
}
