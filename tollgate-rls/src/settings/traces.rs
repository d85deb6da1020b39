//! Traces, as the reference's `TRACING_*` variables ask for them (`src/settings/settings.go`,
//! read by `src/trace/trace.go`): `TRACING_ENABLED`, the resource's `TRACING_SERVICE_NAME`,
//! `TRACING_SERVICE_NAMESPACE` and `TRACING_SERVICE_INSTANCE_ID`, the OTLP protocol
//! `TRACING_EXPORTER_PROTOCOL` (`http` or `grpc`) and `TRACING_SAMPLING_RATE`. Where the spans
//! go is for the OpenTelemetry exporter's own variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, …).

use super::error::SettingsError;
use super::vars::Vars;

/// How spans are exported.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Traces {
    pub(crate) service_name: String,
    pub(crate) service_namespace: String,
    /// Empty: a random UUID, as the reference makes one.
    pub(crate) service_instance_id: String,
    pub(crate) grpc: bool,
    /// Of the traces started here (a sampled parent is always followed): 1 or more all, 0 or
    /// less none.
    pub(crate) sampling_rate: f64,
}

/// The traces `vars` ask for; `None` without `TRACING_ENABLED`.
pub(crate) fn read(vars: &Vars<'_>) -> Result<Option<Traces>, SettingsError> {
    let enabled = vars.flag("TRACING_ENABLED", false)?;
    let grpc = match vars.get("TRACING_EXPORTER_PROTOCOL", "http").as_str() {
        "http" | "" => false,
        "grpc" => true,
        other => {
            // trace.go's createClient: "Invalid otlptrace client protocol".
            let expected = "expected http or grpc";
            return Err(SettingsError::invalid(
                "TRACING_EXPORTER_PROTOCOL",
                other,
                expected,
            ));
        }
    };
    let sampling_rate = vars.parsed(
        "TRACING_SAMPLING_RATE",
        1.0,
        |v| v.trim().parse::<f64>().ok().filter(|r| !r.is_nan()),
        "expected a number such as 1 (every trace) or 0.1",
    )?;
    Ok(enabled.then(|| Traces {
        service_name: vars.get("TRACING_SERVICE_NAME", "RateLimit"),
        service_namespace: vars.get("TRACING_SERVICE_NAMESPACE", ""),
        service_instance_id: vars.get("TRACING_SERVICE_INSTANCE_ID", ""),
        grpc,
        sampling_rate,
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<Option<Traces>, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    /// The reference's defaults (`settings.go`): off, `RateLimit`, `http`, every trace.
    #[test]
    fn the_references_defaults_and_values() {
        assert_eq!(read_from(&[]), Ok(None));
        let on = read_from(&[("TRACING_ENABLED", "true")]).unwrap().unwrap();
        assert_eq!(
            (on.service_name.as_str(), on.grpc, on.sampling_rate),
            ("RateLimit", false, 1.0)
        );
        let grpc = [
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
        ];
        assert!(read_from(&grpc).unwrap().unwrap().grpc);
        let e = read_from(&[("TRACING_EXPORTER_PROTOCOL", "thrift")]).unwrap_err();
        assert!(e.starts_with("TRACING_EXPORTER_PROTOCOL=\"thrift\""), "{e}");
        let e = read_from(&[("TRACING_SAMPLING_RATE", "often")]).unwrap_err();
        assert!(e.starts_with("TRACING_SAMPLING_RATE="), "{e}");
    }
}
