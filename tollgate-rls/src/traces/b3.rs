//! The B3 propagator the reference adds to W3C trace context (`src/trace/trace.go`:
//! `b3.New()` of OpenTelemetry's contrib), for Envoys that trace with Zipkin headers: the
//! parent is read from the single `b3` header (`{trace}-{span}[-{sampled}]`) or from
//! `x-b3-traceid`, `x-b3-spanid` and `x-b3-sampled` (or `x-b3-flags: 1`); injected as `b3`.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::propagation::{text_map_propagator::FieldIter, Extractor, Injector};
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use opentelemetry::Context;

/// B3, single and multiple headers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct B3;

static FIELDS: std::sync::LazyLock<[String; 5]> = std::sync::LazyLock::new(|| {
    [
        "b3",
        "x-b3-traceid",
        "x-b3-spanid",
        "x-b3-sampled",
        "x-b3-flags",
    ]
    .map(str::to_owned)
});

impl TextMapPropagator for B3 {
    fn inject_context(&self, cx: &Context, injector: &mut dyn Injector) {
        let span = cx.span();
        let context = span.span_context();
        if context.is_valid() {
            let sampled = if context.is_sampled() { "1" } else { "0" };
            let value = format!("{}-{}-{sampled}", context.trace_id(), context.span_id());
            injector.set("b3", value);
        }
    }

    fn extract_with_context(&self, cx: &Context, extractor: &dyn Extractor) -> Context {
        match single(extractor).or_else(|| multiple(extractor)) {
            Some(context) => cx.with_remote_span_context(context),
            None => cx.clone(),
        }
    }

    fn fields(&self) -> FieldIter<'_> {
        FieldIter::new(FIELDS.as_slice())
    }
}

/// `b3: {trace}-{span}[-{sampled}[-{parent}]]`.
fn single(extractor: &dyn Extractor) -> Option<SpanContext> {
    let value = extractor.get("b3")?;
    let mut parts = value.split('-');
    let (trace, span) = (parts.next()?, parts.next()?);
    context(trace, span, parts.next())
}

/// `x-b3-traceid`, `x-b3-spanid`, `x-b3-sampled` or `x-b3-flags`.
fn multiple(extractor: &dyn Extractor) -> Option<SpanContext> {
    let (trace, span) = (
        extractor.get("x-b3-traceid")?,
        extractor.get("x-b3-spanid")?,
    );
    let sampled = match extractor.get("x-b3-flags") {
        Some("1") => Some("d"),
        _ => extractor.get("x-b3-sampled"),
    };
    context(trace, span, sampled)
}

/// The remote parent of these fields; `None` when they are not B3's.
fn context(trace: &str, span: &str, sampled: Option<&str>) -> Option<SpanContext> {
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !(hex(trace, 32) || hex(trace, 16)) || !hex(span, 16) {
        return None;
    }
    let trace = TraceId::from_hex(&format!("{trace:0>32}")).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = match sampled {
        Some("1" | "d" | "true") => TraceFlags::SAMPLED,
        _ => TraceFlags::default(),
    };
    let context = SpanContext::new(trace, span, flags, true, TraceState::default());
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn extracted(headers: &[(&str, &str)]) -> Option<SpanContext> {
        let map: HashMap<String, String> = (headers.iter())
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let cx = B3.extract_with_context(&Context::new(), &map);
        let context = cx.span().span_context().clone();
        context.is_valid().then_some(context)
    }

    #[test]
    fn single_and_multiple_headers() {
        let trace = "463ac35c9f6413ad48485a3953bb6124";
        let single = extracted(&[("b3", &format!("{trace}-a2fb4a1d1a96d312-1"))]).unwrap();
        assert_eq!(single.trace_id().to_string(), trace);
        assert!(single.is_sampled() && single.is_remote());
        let multiple = extracted(&[
            ("x-b3-traceid", "48485a3953bb6124"),
            ("x-b3-spanid", "a2fb4a1d1a96d312"),
            ("x-b3-sampled", "0"),
        ])
        .unwrap();
        assert_eq!(
            multiple.trace_id().to_string(),
            "000000000000000048485a3953bb6124"
        );
        assert!(!multiple.is_sampled());
        assert!(extracted(&[("b3", "0")]).is_none());
    }
}
