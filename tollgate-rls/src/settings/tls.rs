//! `GRPC_SERVER_USE_TLS`: gRPC served over TLS, and over mutual TLS when
//! `GRPC_CLIENT_TLS_CACERT` names the CA that clients' certificates must chain to (the
//! reference's `GrpcServerTlsConfig` in `src/settings/settings.go`).

use std::path::PathBuf;

use super::error::SettingsError;
use super::vars::Vars;

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
pub(crate) fn read(vars: &Vars<'_>) -> Result<Option<GrpcTls>, SettingsError> {
    if !vars.flag("GRPC_SERVER_USE_TLS", false)? {
        return Ok(None);
    }
    let (Some(cert), Some(key)) = (
        vars.set("GRPC_SERVER_TLS_CERT"),
        vars.set("GRPC_SERVER_TLS_KEY"),
    ) else {
        return Err(SettingsError::conflict_at(
            "GRPC_SERVER_USE_TLS",
            "true",
            "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
        ));
    };
    let client_san = vars.set("GRPC_CLIENT_TLS_SAN");
    // Envoy Gateway mounts its CA and names it `GRPC_SERVER_TLS_CA_CERT`, which the reference
    // does not read (it then verifies no client); taken here as the clients' CA when
    // `GRPC_CLIENT_TLS_CACERT` is not set, so Envoy Gateway's mutual TLS holds.
    let client_ca = (vars.set("GRPC_CLIENT_TLS_CACERT"))
        .or_else(|| vars.set("GRPC_SERVER_TLS_CA_CERT"))
        .map(PathBuf::from);
    if client_san.is_some() && client_ca.is_none() {
        return Err(SettingsError::conflict(
            "GRPC_CLIENT_TLS_SAN",
            "needs GRPC_CLIENT_TLS_CACERT",
        ));
    }
    Ok(Some(GrpcTls {
        cert: cert.into(),
        key: key.into(),
        client_ca,
        client_san,
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<Option<GrpcTls>, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    #[test]
    fn tls_needs_a_certificate_and_a_name_needs_a_ca() {
        assert!(read_from(&[("GRPC_SERVER_USE_TLS", "false")])
            .unwrap()
            .is_none());
        assert_eq!(
            read_from(&[("GRPC_SERVER_USE_TLS", "true")]).unwrap_err(),
            "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"
        );
        let on = [
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/c.pem"),
            ("GRPC_SERVER_TLS_KEY", "/k.pem"),
        ];
        let mut named = on.to_vec();
        named.push(("GRPC_CLIENT_TLS_SAN", "envoy"));
        assert_eq!(
            read_from(&named).unwrap_err(),
            "GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT"
        );
        named.push(("GRPC_SERVER_TLS_CA_CERT", "/ca.pem"));
        let tls = read_from(&named).unwrap().unwrap();
        assert_eq!(tls.client_ca, Some(PathBuf::from("/ca.pem")));
        assert_eq!(tls.client_san.as_deref(), Some("envoy"));
    }
}
