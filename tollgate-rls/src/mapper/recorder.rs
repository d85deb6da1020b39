//! A metrics recorder that renames the server's series by a [`Mapper`] as they are registered
//! (once per series: a request then costs what it cost before), and scales the response
//! time's values, which the library records in seconds, from the reference's milliseconds.

use std::sync::Arc;

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Label, Metadata, Recorder, SharedString,
    Unit,
};

use super::{Mapped, Mapper};
use crate::statsd::{reference_name, StatKind};

/// `inner`, with every series of the reference renamed by `mapper`; tollgate's own series, and
/// those past `STATS_MAX_SERIES` (`overflow="true"`), keep their names.
#[derive(Debug)]
pub(crate) struct MappedRecorder<R> {
    pub(crate) inner: R,
    pub(crate) mapper: Mapper,
}

impl<R: Recorder> MappedRecorder<R> {
    /// What `key` becomes: `None` to keep it.
    fn mapped(&self, key: &Key) -> Option<(Mapped, StatKind)> {
        let labels: Vec<(&str, String)> = (key.labels())
            .map(|l| (l.key(), l.value().to_owned()))
            .collect();
        if labels.iter().any(|(k, _)| *k == "overflow") {
            return None;
        }
        let (statsd, kind) = reference_name(key.name(), &labels)?;
        Some((self.mapper.map(&statsd, kind), kind))
    }
}

/// The series `name{labels}`.
fn key(name: &str, labels: &[(String, String)]) -> Key {
    let labels: Vec<Label> = (labels.iter())
        .map(|(k, v)| Label::new(k.clone(), v.clone()))
        .collect();
    Key::from_parts(name.to_owned(), labels)
}

impl<R: Recorder> Recorder for MappedRecorder<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, k: &Key, metadata: &Metadata<'_>) -> Counter {
        match self.mapped(k) {
            None => self.inner.register_counter(k, metadata),
            Some((Mapped::Drop, _)) => Counter::noop(),
            Some((Mapped::Series { name, labels, .. }, _)) => {
                self.inner.register_counter(&key(&name, &labels), metadata)
            }
        }
    }

    fn register_gauge(&self, k: &Key, metadata: &Metadata<'_>) -> Gauge {
        match self.mapped(k) {
            None => self.inner.register_gauge(k, metadata),
            Some((Mapped::Drop, _)) => Gauge::noop(),
            Some((Mapped::Series { name, labels, .. }, _)) => {
                self.inner.register_gauge(&key(&name, &labels), metadata)
            }
        }
    }

    fn register_histogram(&self, k: &Key, metadata: &Metadata<'_>) -> Histogram {
        match self.mapped(k) {
            None => self.inner.register_histogram(k, metadata),
            Some((Mapped::Drop, _)) => Histogram::noop(),
            Some((
                Mapped::Series {
                    name,
                    labels,
                    scale,
                    ..
                },
                kind,
            )) => {
                let inner = self
                    .inner
                    .register_histogram(&key(&name, &labels), metadata);
                // A timer's series records seconds; the reference's timer is milliseconds,
                // which the mapping scales.
                let factor = match kind {
                    StatKind::Timer => 1000.0 * scale,
                    StatKind::Counter | StatKind::Gauge => scale,
                };
                Histogram::from_arc(Arc::new(Scaled { inner, factor }))
            }
        }
    }
}

/// A histogram whose values are multiplied by `factor` on their way in.
struct Scaled {
    inner: Histogram,
    factor: f64,
}

impl HistogramFn for Scaled {
    fn record(&self, value: f64) {
        self.inner.record(value * self.factor);
    }
}

#[cfg(test)]
mod tests {
    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;
    use crate::mapper::default_mapping_in_milliseconds;

    /// With the reference's default mapping in milliseconds, the response time recorded in
    /// seconds is exported in milliseconds under the same name; the rest keeps its names.
    #[test]
    fn series_are_renamed_and_the_time_scaled() {
        let inner = PrometheusBuilder::new().build_recorder();
        let handle = inner.handle();
        let mapper = Mapper::from_yaml(&default_mapping_in_milliseconds()).unwrap();
        let recorder = MappedRecorder { inner, mapper };
        metrics::with_local_recorder(&recorder, || {
            let method = [("grpc_method", "ShouldRateLimit")];
            metrics::histogram!("ratelimit_service_response_time_seconds", &method).record(0.25);
            metrics::counter!("ratelimit_service_total_requests", &method).increment(2);
            metrics::counter!("tollgate_store_errors").increment(1);
        });
        let text = handle.render();
        assert!(
            text.contains(
                "ratelimit_service_response_time_seconds_sum{grpc_method=\"ShouldRateLimit\"} 250"
            ),
            "{text}"
        );
        assert!(
            text.contains("ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 2")
        );
        assert!(text.contains("tollgate_store_errors 1"), "{text}");
    }
}
