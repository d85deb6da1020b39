//! `CONFIG_TYPE=GRPC_XDS_SOTW`: the reference's `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*`
//! variables (its `src/settings/settings.go`), read into the library's [`XdsSource`].

use std::time::Duration;

use tollgate_rls::{XdsBackoff, XdsSource, XdsTls};

use super::error::SettingsError;
use super::vars::{parse_duration, Vars};

/// The xDS source the variables describe.
pub(crate) fn source(vars: &Vars<'_>) -> Result<XdsSource, SettingsError> {
    let get = |name: &str, default: &str| vars.get(name, default);
    let duration = |name: &str, default: Duration| {
        let expected = "expected a duration such as 100ms, 10s or 1m";
        vars.parsed(name, default, parse_duration, expected)
    };
    let defaults = XdsBackoff::default();
    // The reference passes it as jpillora's Factor, the multiplier: any number (≤ 0 means 2).
    let factor = vars.parsed(
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        defaults.factor,
        |v| v.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
        "expected a number",
    )?;
    let backoff = XdsBackoff {
        initial: duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", defaults.initial)?,
        max: duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", defaults.max)?,
        factor,
        jitter: vars.flag("XDS_CLIENT_BACKOFF_JITTER", defaults.jitter)?,
    };
    // Checked as the reference checks it, and unused as there: its stream retry never retries
    // (the xDS client's backoff.rs says why; ignored.rs logs it when set).
    duration(
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        Duration::from_secs(3),
    )?;
    let mut source = XdsSource::new(get("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"))
        .node_id(get("CONFIG_GRPC_XDS_NODE_ID", "default"))
        .backoff(backoff);
    // "key1=value1,key2=value2"; entries without `=` are skipped, as the reference does.
    for entry in get("CONFIG_GRPC_XDS_NODE_METADATA", "").split(',') {
        if let Some((key, value)) = entry.split_once('=') {
            source = source.node_metadata(key, value);
        }
    }
    // envconfig's map form: "name1:value1,name2:value2".
    let headers = get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "");
    for entry in headers.split(',').filter(|e| !e.is_empty()) {
        let (name, value) = entry.split_once(':').ok_or_else(|| {
            let name = "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS";
            SettingsError::invalid(name, &headers, "expected name:value,…")
        })?;
        source = source.header(name, value);
    }
    if let Some(v) = vars.set("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
        let bytes = v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
            SettingsError::invalid(
                "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
                &v,
                "expected a number of bytes",
            )
        })?;
        source = source.max_message_size(bytes);
    }
    if vars.flag("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)? {
        let path = |name: &str| vars.set(name);
        let mut tls = XdsTls::new();
        match (
            path("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
            path("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
        ) {
            (Some(cert), Some(key)) => tls = tls.identity(cert, key),
            (None, None) => {}
            _ => {
                return Err(SettingsError::conflict(
                    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                    "and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together: set both or neither",
                ))
            }
        }
        if let Some(ca) = path("CONFIG_GRPC_XDS_SERVER_TLS_CACERT") {
            tls = tls.server_ca(ca);
        }
        if let Some(san) = path("CONFIG_GRPC_XDS_SERVER_TLS_SAN") {
            tls = tls.server_name(san);
        }
        source = source.tls(tls);
    }
    Ok(source)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<XdsSource, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        source(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_references_defaults_and_envoy_gateways_values() {
        let s = format!("{:?}", read(&[]).unwrap());
        assert!(s.contains(r#"server_url: "localhost:18000""#), "{s}");
        assert!(s.contains(r#"node_id: "default""#), "{s}");
        assert!(
            s.contains("initial: 10s, max: 60s, factor: 0.5, jitter: true"),
            "{s}"
        );
        let s = format!(
            "{:?}",
            read(&[
                ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
                ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
                ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,bad,team=x=y"),
                ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
                ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
                ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
                ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
            ])
            .unwrap()
        );
        assert!(s.contains(r#"node_id: "envoy-ratelimit""#), "{s}");
        assert!(s.contains(r#"[("zone", "a"), ("team", "x=y")]"#), "{s}");
        assert!(
            s.contains(r#"identity: Some(("/certs/tls.crt", "/certs/tls.key"))"#),
            "{s}"
        );
        assert!(s.contains(r#"server_ca: Some("/certs/ca.crt")"#), "{s}");
    }

    /// The values the reference takes (envconfig into jpillora/backoff, whose zero values
    /// are defaults: xds_grpc_sotw_provider.go:71-76) are taken.
    #[test]
    fn the_references_backoff_values_are_taken() {
        let s = format!(
            "{:?}",
            read(&[
                ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"),
                ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "0"),
                ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1m30s"),
                ("XDS_CLIENT_BACKOFF_JITTER", "false"),
                ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "5s"),
            ])
            .unwrap()
        );
        assert!(
            s.contains("initial: 0ns, max: 90s, factor: 2.0, jitter: false"),
            "{s}"
        );
        let s = format!(
            "{:?}",
            read(&[("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "-1")]).unwrap()
        );
        assert!(s.contains("factor: -1.0"), "{s}");
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = read(&[("XDS_CLIENT_BACKOFF_JITTER", "sometimes")]).unwrap_err();
        assert!(e.starts_with("XDS_CLIENT_BACKOFF_JITTER="), "{e}");
        let e = read(&[
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c.pem"),
        ])
        .unwrap_err();
        assert!(e.contains("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"), "{e}");
        let e = read(&[("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "lots")]).unwrap_err();
        assert!(e.starts_with("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES="), "{e}");
        let e = read(&[("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "half")]).unwrap_err();
        assert!(e.starts_with("XDS_CLIENT_BACKOFF_RANDOM_FACTOR="), "{e}");
        let e = read(&[("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "soon")]).unwrap_err();
        assert!(
            e.starts_with("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL="),
            "{e}"
        );
    }
}
