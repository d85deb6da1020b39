//! `USE_PROMETHEUS`, `PROMETHEUS_ADDR` and `PROMETHEUS_PATH`: the metrics also served on an
//! address of their own, as the reference's Prometheus sink serves them (Envoy Gateway scrapes
//! its rate limit service on `:19001`).

use super::parse_bool;

/// Where the metrics are served besides `HOST:PORT/metrics`.
#[derive(Debug, Clone)]
pub(crate) struct PrometheusListener {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) path: String,
}

/// The listener, when `USE_PROMETHEUS` is true.
pub(crate) fn read(
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<PrometheusListener>, String> {
    let on = match var("USE_PROMETHEUS") {
        None => false,
        Some(v) => {
            parse_bool(&v).ok_or_else(|| format!("USE_PROMETHEUS={v:?}: expected true or false"))?
        }
    };
    if !on {
        return Ok(None);
    }
    // Go's `host:port`; an empty host (":9090") is every interface.
    let addr = var("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
    let bad = || format!("PROMETHEUS_ADDR={addr:?}: expected host:port, such as :9090");
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let port = port.parse::<u16>().map_err(|_| bad())?;
    let host = match host {
        "" => "0.0.0.0".to_owned(),
        host => host.to_owned(),
    };
    let path = var("PROMETHEUS_PATH").unwrap_or_else(|| "/metrics".into());
    if !path.starts_with('/') {
        return Err(format!(
            "PROMETHEUS_PATH={path:?}: expected a path such as /metrics"
        ));
    }
    Ok(Some(PrometheusListener { host, port, path }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(vars: &[(&str, &str)]) -> Result<Option<PrometheusListener>, String> {
        read(&|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn envoy_gateways_address() {
        assert!(listener(&[("PROMETHEUS_ADDR", ":19001")])
            .unwrap()
            .is_none());
        let l = listener(&[("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", ":19001")])
            .unwrap()
            .unwrap();
        assert_eq!(
            (l.host.as_str(), l.port, l.path.as_str()),
            ("0.0.0.0", 19001, "/metrics")
        );
        let e = listener(&[("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", "19001")]).unwrap_err();
        assert!(e.starts_with("PROMETHEUS_ADDR="), "{e}");
    }
}
