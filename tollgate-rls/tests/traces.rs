//! Spans of the built `tollgate-rls` reach an OTLP receiver the test runs, as the reference
//! exports them with `TRACING_ENABLED` (`src/trace/trace.go`; the span is
//! `src/service/ratelimit.go`'s `ShouldRateLimit Execution` with `domain` and `request
//! string`): over OTLP/HTTP (the reference's default protocol) and OTLP/gRPC
//! (`TRACING_EXPORTER_PROTOCOL=grpc`), to `OTEL_EXPORTER_OTLP_ENDPOINT`, a child of the trace
//! Envoy sent (W3C `traceparent` or B3), in a resource named by `TRACING_SERVICE_*`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use support::{eventually, request, Rls, Runtime};
use tokio::net::TcpListener;

const EDGE: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100 }
";

fn runtime(test: &str) -> Runtime {
    let runtime = Runtime::new(test);
    runtime.write("edge.yaml", EDGE);
    runtime
}

/// What a receiver was sent.
type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;

/// An OTLP/HTTP receiver (`POST /v1/traces`, protobuf) on a free port: its address.
async fn http_receiver(received: Received) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let received = Arc::clone(&received);
            async move {
                let request = ExportTraceServiceRequest::decode(body).unwrap();
                received.lock().unwrap().push(request);
                ExportTraceServiceResponse::default().encode_to_vec()
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// An OTLP/gRPC receiver.
struct GrpcReceiver(Received);

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn grpc_receiver(received: Received) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(GrpcReceiver(received)))
            .serve_with_incoming(incoming),
    );
    format!("http://{address}")
}

/// The spans received, with their resource's attributes.
fn spans(received: &Received) -> Vec<(Span, Vec<(String, String)>)> {
    let mut out = Vec::new();
    for request in received.lock().unwrap().iter() {
        for resource_spans in &request.resource_spans {
            let resource = attributes(
                &(resource_spans.resource.as_ref())
                    .map(|r| r.attributes.clone())
                    .unwrap_or_default(),
            );
            for scope in &resource_spans.scope_spans {
                out.extend(scope.spans.iter().map(|s| (s.clone(), resource.clone())));
            }
        }
    }
    out
}

fn attributes(kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Vec<(String, String)> {
    (kvs.iter())
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.clone()) {
                Some(Value::StringValue(s)) => s,
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// Asks `rls` once with `headers` as the request's metadata.
async fn ask_with(rls: &Rls, headers: &[(&'static str, String)]) {
    let mut client = rls.client().await;
    let mut grpc = tonic::Request::new(request("edge", &[&[("user", "a")]]));
    for (name, value) in headers {
        grpc.metadata_mut().insert(*name, value.parse().unwrap());
    }
    client.should_rate_limit(grpc).await.unwrap();
}

/// Waits up to 10 s for one `ShouldRateLimit Execution` span.
async fn one_span(received: &Received) -> (Span, Vec<(String, String)>) {
    let arrived = eventually(Duration::from_secs(10), || async {
        spans(received)
            .iter()
            .any(|(s, _)| s.name == "ShouldRateLimit Execution")
    })
    .await;
    assert!(arrived, "no span reached the receiver");
    let spans = spans(received);
    let found = spans
        .iter()
        .find(|(s, _)| s.name == "ShouldRateLimit Execution");
    found.cloned().unwrap()
}

#[tokio::test]
async fn spans_reach_an_otlp_http_receiver_under_envoys_trace() {
    let received = Received::default();
    let endpoint = http_receiver(Arc::clone(&received)).await;
    let runtime = runtime("traces-http");
    let rls = Rls::start(
        &runtime,
        &[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAME", "edge-rls"),
            ("TRACING_SERVICE_NAMESPACE", "gateway"),
            ("TRACING_SERVICE_INSTANCE_ID", "rls-1"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    ask_with(&rls, &[("traceparent", format!("00-{TRACE}-{PARENT}-01"))]).await;
    let (span, resource) = one_span(&received).await;
    assert_eq!(hex(&span.trace_id), TRACE);
    assert_eq!(hex(&span.parent_span_id), PARENT);
    let attributes = attributes(&span.attributes);
    assert!(
        attributes.contains(&("domain".into(), "edge".into())),
        "{attributes:?}"
    );
    let text = r#"domain:"edge" descriptors:{entries:{key:"user" value:"a"}}"#;
    assert!(
        attributes.contains(&("request string".into(), text.into())),
        "{attributes:?}"
    );
    for (key, value) in [
        ("service.name", "edge-rls"),
        ("service.namespace", "gateway"),
        ("service.instance.id", "rls-1"),
    ] {
        assert!(
            resource.contains(&(key.into(), value.into())),
            "{resource:?}"
        );
    }
}

#[tokio::test]
async fn spans_reach_an_otlp_grpc_receiver_under_a_b3_trace() {
    let received = Received::default();
    let endpoint = grpc_receiver(Arc::clone(&received)).await;
    let runtime = runtime("traces-grpc");
    let rls = Rls::start(
        &runtime,
        &[
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    ask_with(&rls, &[("b3", format!("{TRACE}-{PARENT}-1"))]).await;
    let (span, resource) = one_span(&received).await;
    assert_eq!(hex(&span.trace_id), TRACE);
    assert_eq!(hex(&span.parent_span_id), PARENT);
    // The reference's default service name.
    assert!(
        resource.contains(&("service.name".into(), "RateLimit".into())),
        "{resource:?}"
    );
}

/// Without `TRACING_ENABLED` nothing is exported, whatever the exporter's variables say; and
/// a sampling rate of 0 exports no trace that starts here (`ParentBased(TraceIDRatioBased)`).
#[tokio::test]
async fn nothing_is_exported_when_tracing_is_off_or_not_sampled() {
    let received = Received::default();
    let endpoint = http_receiver(Arc::clone(&received)).await;
    let runtime = runtime("traces-off");
    let env = |extra: &[(&'static str, &'static str)]| {
        let mut env = vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ];
        env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        env
    };
    for extra in [
        &[][..],
        &[("TRACING_ENABLED", "true"), ("TRACING_SAMPLING_RATE", "0")][..],
    ] {
        let env = env(extra);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let rls = Rls::start(&runtime, &env);
        ask_with(&rls, &[]).await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(spans(&received).is_empty(), "{extra:?}");
    }
}
