//! Where the server listens and what its gRPC connections may do: `HOST`, `PORT`, `GRPC_HOST`,
//! `GRPC_PORT`, `DEBUG_HOST`, `DEBUG_PORT` and `GRPC_UDS` (the reference's names and defaults),
//! `GRPC_MAX_CONNECTION_AGE(_GRACE)`, `GRPC_MAX_CONCURRENT_STREAMS`, and TLS (`tls.rs`).

use std::path::PathBuf;
use std::time::Duration;

use super::error::SettingsError;
use super::tls::{self, GrpcTls};
use super::vars::Vars;

/// Requests in flight on one gRPC connection unless `GRPC_MAX_CONCURRENT_STREAMS` says
/// otherwise: finite (one connection cannot queue unbounded work), and far above what Envoy
/// keeps in flight on one connection.
pub(crate) const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 1024;

/// The listeners and the gRPC connections' limits.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) grpc_host: String,
    pub(crate) grpc_port: u16,
    pub(crate) debug_host: String,
    pub(crate) debug_port: u16,
    /// `GRPC_UDS`: gRPC on this Unix socket instead of `GRPC_HOST:GRPC_PORT`.
    pub(crate) grpc_uds: Option<PathBuf>,
    /// `GRPC_SERVER_USE_TLS`: gRPC over TLS (mutual with `GRPC_CLIENT_TLS_CACERT`).
    pub(crate) grpc_tls: Option<GrpcTls>,
    /// `GRPC_MAX_CONNECTION_AGE`: a connection older than this is sent a GOAWAY, so clients
    /// that keep theirs (Envoy) spread over new instances.
    pub(crate) grpc_max_connection_age: Duration,
    /// `GRPC_MAX_CONNECTION_AGE_GRACE`: how long its requests in flight may then take.
    pub(crate) grpc_max_connection_age_grace: Duration,
    /// `GRPC_MAX_CONCURRENT_STREAMS` (tollgate-rls's own): requests in flight on one HTTP/2
    /// connection.
    pub(crate) grpc_max_concurrent_streams: u32,
}

/// The listeners `vars` name. TLS is served on gRPC's listener, `GRPC_PORT` or `GRPC_UDS`,
/// as the reference serves it on either.
pub(crate) fn read(vars: &Vars<'_>) -> Result<Server, SettingsError> {
    let grpc_max_concurrent_streams = vars.parsed(
        "GRPC_MAX_CONCURRENT_STREAMS",
        DEFAULT_MAX_CONCURRENT_STREAMS,
        |v| v.parse::<u32>().ok().filter(|n| *n > 0),
        "expected a number from 1 to 4294967295",
    )?;
    let server = Server {
        host: vars.get("HOST", "0.0.0.0"),
        port: vars.port("PORT", 8080)?,
        grpc_host: vars.get("GRPC_HOST", "0.0.0.0"),
        grpc_port: vars.port("GRPC_PORT", 8081)?,
        debug_host: vars.get("DEBUG_HOST", "0.0.0.0"),
        debug_port: vars.port("DEBUG_PORT", 6070)?,
        grpc_uds: vars.set("GRPC_UDS").map(PathBuf::from),
        grpc_tls: tls::read(vars)?,
        grpc_max_connection_age: vars
            .duration("GRPC_MAX_CONNECTION_AGE", Duration::from_secs(86_400))?,
        grpc_max_connection_age_grace: vars
            .duration("GRPC_MAX_CONNECTION_AGE_GRACE", Duration::from_secs(3_600))?,
        grpc_max_concurrent_streams,
    };
    Ok(server)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<Server, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_references_defaults() {
        let s = read_from(&[]).unwrap();
        assert_eq!((s.grpc_port, s.port, s.debug_port), (8081, 8080, 6070));
        assert_eq!(
            s.grpc_max_concurrent_streams,
            DEFAULT_MAX_CONCURRENT_STREAMS
        );
        assert!(s.grpc_uds.is_none() && s.grpc_tls.is_none());
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = read_from(&[("GRPC_PORT", "http")]).unwrap_err();
        assert!(e.starts_with("GRPC_PORT="), "{e}");
        let e = read_from(&[("GRPC_MAX_CONCURRENT_STREAMS", "0")]).unwrap_err();
        assert!(e.starts_with("GRPC_MAX_CONCURRENT_STREAMS="), "{e}");
        // The reference's server_impl.go (lines 261-283) serves its TLS on either listener.
        let tls_on_a_socket = [
            ("GRPC_UDS", "/tmp/rls.sock"),
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/c.pem"),
            ("GRPC_SERVER_TLS_KEY", "/k.pem"),
        ];
        let s = read_from(&tls_on_a_socket).unwrap();
        assert!(s.grpc_uds.is_some() && s.grpc_tls.is_some());
    }
}
