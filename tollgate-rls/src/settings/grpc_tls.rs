//! `GRPC_SERVER_USE_TLS`: gRPC served over TLS, and over mutual TLS when
//! `GRPC_CLIENT_TLS_CACERT` names the CA that clients' certificates must chain to (the
//! reference's `GrpcServerTlsConfig` in `src/settings/settings.go`).

use std::path::PathBuf;

use super::parse_bool;

/// The server's certificate and what it asks of clients.
#[derive(Debug, Clone)]
pub(crate) struct GrpcTls {
    /// `GRPC_SERVER_TLS_CERT`: the certificate chain, PEM (re-read when it changes).
    pub(crate) cert: PathBuf,
    /// `GRPC_SERVER_TLS_KEY`: its private key, PEM (re-read when it changes).
    pub(crate) key: PathBuf,
    /// `GRPC_CLIENT_TLS_CACERT`: clients must present a certificate chaining to these.
    pub(crate) client_ca: Option<PathBuf>,
    /// `GRPC_CLIENT_TLS_SAN`: and carrying this name.
    pub(crate) client_san: Option<String>,
}

/// TLS on the gRPC port, when `GRPC_SERVER_USE_TLS` is true.
pub(crate) fn read(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<GrpcTls>, String> {
    let on = match var("GRPC_SERVER_USE_TLS") {
        None => false,
        Some(v) => parse_bool(&v)
            .ok_or_else(|| format!("GRPC_SERVER_USE_TLS={v:?}: expected true or false"))?,
    };
    if !on {
        return Ok(None);
    }
    let path = |name: &str| var(name).filter(|v| !v.is_empty());
    let (Some(cert), Some(key)) = (path("GRPC_SERVER_TLS_CERT"), path("GRPC_SERVER_TLS_KEY"))
    else {
        return Err(
            "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY".into(),
        );
    };
    let client_san = path("GRPC_CLIENT_TLS_SAN");
    // Envoy Gateway mounts its CA and names it `GRPC_SERVER_TLS_CA_CERT`, which the reference
    // does not read (it then verifies no client); taken here as the clients' CA when
    // `GRPC_CLIENT_TLS_CACERT` is not set, so Envoy Gateway's mutual TLS holds.
    let client_ca = (path("GRPC_CLIENT_TLS_CACERT").or_else(|| path("GRPC_SERVER_TLS_CA_CERT")))
        .map(PathBuf::from);
    if client_san.is_some() && client_ca.is_none() {
        return Err("GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT".into());
    }
    Ok(Some(GrpcTls {
        cert: cert.into(),
        key: key.into(),
        client_ca,
        client_san,
    }))
}
