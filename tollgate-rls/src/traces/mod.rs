//! Spans exported over OTLP with `TRACING_ENABLED`, as the reference's `src/trace/trace.go`
//! sets OpenTelemetry up: an OTLP exporter over HTTP (protobuf) or gRPC
//! (`TRACING_EXPORTER_PROTOCOL`), configured by OpenTelemetry's own variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `…_HEADERS`,
//! `…_TIMEOUT`; the batch's `OTEL_BSP_*`), spans batched, a sampler that follows a sampled
//! parent and samples `TRACING_SAMPLING_RATE` of the rest, a resource naming the service
//! (`service.name`, `service.namespace`, `service.instance.id`), and the propagators W3C
//! trace context, B3 (`b3.rs`) and baggage. The library makes one span per `ShouldRateLimit`
//! (`RateLimitServiceBuilder::trace_requests`).

mod b3;

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use opentelemetry::propagation::TextMapCompositePropagator;
use opentelemetry::KeyValue;
use opentelemetry_otlp::SpanExporter;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::runtime::Tokio;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::settings::Traces;

/// How long the spans still batched may take to leave at the stop.
pub(crate) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Sets the global tracer provider and propagator `traces` describes; the provider, to shut
/// down at the stop. Must run inside the Tokio runtime, where the batch is sent from.
pub(crate) fn install(traces: &Traces) -> Result<SdkTracerProvider, String> {
    let exporter = match traces.grpc {
        true => SpanExporter::builder().with_tonic().build(),
        false => SpanExporter::builder().with_http().build(),
    }
    .map_err(|e| format!("cannot set up the OTLP exporter: {e}"))?;
    let instance = match traces.service_instance_id.as_str() {
        "" => random_uuid(),
        given => given.to_owned(),
    };
    let resource = Resource::builder()
        .with_attributes([
            KeyValue::new("service.name", traces.service_name.clone()),
            KeyValue::new("service.namespace", traces.service_namespace.clone()),
            KeyValue::new("service.instance.id", instance.clone()),
        ])
        .build();
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(traces.sampling_rate)));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter, Tokio).build())
        .with_sampler(sampler)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(b3::B3),
        Box::new(BaggagePropagator::new()),
    ]));
    tracing::info!(
        "traces exported over OTLP/{}: service {:?}, namespace {:?}, instance {instance}, \
         sampling rate {}",
        if traces.grpc { "gRPC" } else { "HTTP" },
        traces.service_name,
        traces.service_namespace,
        traces.sampling_rate
    );
    Ok(provider)
}

/// Sends the spans still batched, within [`SHUTDOWN_TIMEOUT`], off the runtime's threads.
pub(crate) async fn shut_down(provider: SdkTracerProvider) {
    let flushed =
        tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT));
    if let Ok(Err(e)) = flushed.await {
        tracing::warn!("the last spans may not have been exported: {e}");
    }
}

/// A random version 4 UUID, as the reference names an instance without
/// `TRACING_SERVICE_INSTANCE_ID`.
fn random_uuid() -> String {
    let random = || RandomState::new().hash_one(std::time::Instant::now());
    let (high, low) = (random(), random());
    let high = (high & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
    let low = (low & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xffff,
        high & 0xffff,
        low >> 48,
        low & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_uuids_are_version_4() {
        let (a, b) = (random_uuid(), random_uuid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(["8", "9", "a", "b"].contains(&&a[19..20]), "{a}");
    }
}
