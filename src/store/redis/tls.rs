//! TLS for `rediss://` addresses (the `tls` feature): rustls's crypto provider, and a
//! [`RedisTls`] applied to one address's connection details.

use deadpool_redis::redis::{
    self, ClientTlsConfig, ConnectionAddr, ConnectionInfo, RedisResult, TlsCertificates,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::options::RedisTls;
use crate::error::{ConfigError, ConfigErrorKind};

/// Installs rustls's `ring` provider as the process default, unless one is installed already.
/// redis-rs builds its TLS configuration from the process default, and rustls cannot choose
/// one by itself when the app's other crates enable a second provider.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // An error means another thread installed one first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Checks what a [`RedisTls`] holds before any connection uses it: a PEM that holds no
/// certificate (or no key) would otherwise fail every handshake, long after the start.
pub(crate) fn validate(tls: &RedisTls) -> Result<(), ConfigError> {
    let invalid =
        |what: &str| ConfigError::with_kind(ConfigErrorKind::Store, format!("Redis TLS: {what}"));
    let certificates = |pem: &[u8]| {
        CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map(|certs| certs.len())
            .unwrap_or(0)
    };
    if let Some(pem) = &tls.root_certificates {
        if certificates(pem) == 0 {
            return Err(invalid("the root certificates hold no PEM certificate"));
        }
    }
    if let Some((certificate, key)) = &tls.client_certificate {
        if certificates(certificate) == 0 {
            return Err(invalid("the client certificate holds no PEM certificate"));
        }
        if PrivateKeyDer::from_pem_slice(key).is_err() {
            return Err(invalid("the client key holds no PEM private key"));
        }
    }
    Ok(())
}

/// The certificates of `tls` as redis-rs takes them, if it holds any.
pub(crate) fn certificates(tls: &RedisTls) -> Option<TlsCertificates> {
    if tls.root_certificates.is_none() && tls.client_certificate.is_none() {
        return None;
    }
    Some(TlsCertificates {
        client_tls: (tls.client_certificate.clone()).map(|(client_cert, client_key)| {
            ClientTlsConfig {
                client_cert,
                client_key,
            }
        }),
        root_cert: tls.root_certificates.clone(),
    })
}

/// `info` with `tls` applied when it is a TLS address (`rediss://`); any other address is
/// returned as it is.
pub(crate) fn apply(info: ConnectionInfo, tls: &RedisTls) -> RedisResult<ConnectionInfo> {
    if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
        return Ok(info);
    }
    let info = match certificates(tls) {
        Some(certificates) => redis::Client::build_with_tls(info, certificates)?
            .get_connection_info()
            .clone(),
        None => info,
    };
    if !tls.skip_hostname_verification {
        return Ok(info);
    }
    let mut addr = info.addr().clone();
    addr.set_danger_accept_invalid_hostnames(true);
    Ok(info.set_addr(addr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use deadpool_redis::redis::IntoConnectionInfo;

    #[test]
    fn pem_without_certificates_is_refused() {
        let tls = RedisTls::new().root_certificates("not a certificate");
        assert!(validate(&tls).unwrap_err().to_string().contains("root"));
        let tls = RedisTls::new().client_certificate("x", "y");
        assert!(validate(&tls).is_err());
        assert!(validate(&RedisTls::new()).is_ok());
    }

    #[test]
    fn plain_addresses_are_left_alone() {
        let info = "redis://127.0.0.1:6379".into_connection_info().unwrap();
        let tls = RedisTls::new().skip_hostname_verification(true);
        let applied = apply(info, &tls).unwrap();
        assert!(matches!(applied.addr(), ConnectionAddr::Tcp(..)));
        let info = "rediss://127.0.0.1:6379".into_connection_info().unwrap();
        let applied = apply(info, &tls).unwrap();
        let ConnectionAddr::TcpTls { tls_params, .. } = applied.addr() else {
            panic!("not TLS");
        };
        assert!(tls_params.is_some());
    }
}
