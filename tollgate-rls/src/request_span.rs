//! One OpenTelemetry span per `ShouldRateLimit`, as the reference makes it
//! (`src/service/ratelimit.go`, `ShouldRateLimit`: `tracer.Start(ctx, "ShouldRateLimit
//! Execution", …)` with the attributes `domain` and `request string`), a child of the trace
//! the request's metadata carries (the global propagator reads it: W3C `traceparent`, B3,
//! baggage in the reference). The span goes to the global tracer provider; a service builds
//! none unless asked ([`trace_requests`](crate::RateLimitServiceBuilder::trace_requests)).

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use opentelemetry::global::{self, BoxedSpan};
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::Tracer;
use opentelemetry::KeyValue;
use std::fmt::Write as _;
use tonic::metadata::{KeyRef, MetadataMap};

/// The span of one `ShouldRateLimit`; it ends when dropped.
pub(crate) struct RequestSpan {
    _span: BoxedSpan,
}

impl RequestSpan {
    /// With `trace`, the span of `request`; else nothing, at no cost.
    pub(crate) fn start_if(
        trace: bool,
        request: &tonic::Request<RateLimitRequest>,
    ) -> Option<Self> {
        trace.then(|| Self::start(request.metadata(), request.get_ref()))
    }

    /// Starts the span of `request`, under the trace `metadata` carries.
    pub(crate) fn start(metadata: &MetadataMap, request: &RateLimitRequest) -> Self {
        let parent = global::get_text_map_propagator(|p| p.extract(&Metadata(metadata)));
        let tracer = global::tracer("ratelimit");
        let span = tracer
            .span_builder("ShouldRateLimit Execution")
            .with_attributes([
                KeyValue::new("domain", request.domain.clone()),
                KeyValue::new("request string", text(request)),
            ])
            .start_with_context(&tracer, &parent);
        Self { _span: span }
    }
}

/// A request's gRPC metadata, read by a propagator.
struct Metadata<'a>(&'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        (self.0.keys())
            .filter_map(|k| match k {
                KeyRef::Ascii(k) => Some(k.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// `request` in the protobuf text form the reference's `request.String()` gives:
/// `domain:"edge" descriptors:{entries:{key:"user" value:"a"}} hits_addend:1`.
fn text(request: &RateLimitRequest) -> String {
    let mut out = format!("domain:{:?}", request.domain);
    for descriptor in &request.descriptors {
        out.push_str(" descriptors:{");
        let mut parts = Vec::new();
        for entry in &descriptor.entries {
            parts.push(format!(
                "entries:{{key:{:?} value:{:?}}}",
                entry.key, entry.value
            ));
        }
        if let Some(limit) = &descriptor.limit {
            parts.push(format!(
                "limit:{{requests_per_unit:{} unit:{}}}",
                limit.requests_per_unit, limit.unit
            ));
        }
        if let Some(hits) = &descriptor.hits_addend {
            parts.push(format!("hits_addend:{{value:{}}}", hits.value));
        }
        out.push_str(&parts.join(" "));
        out.push('}');
    }
    if request.hits_addend != 0 {
        let _ = write!(out, " hits_addend:{}", request.hits_addend);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::descriptor;

    #[test]
    fn the_request_as_protobuf_text() {
        let request = RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![descriptor(&[("user", "a\"b")])],
            hits_addend: 2,
        };
        assert_eq!(
            text(&request),
            r#"domain:"edge" descriptors:{entries:{key:"user" value:"a\"b"}} hits_addend:2"#
        );
    }
}
