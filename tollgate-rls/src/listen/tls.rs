//! gRPC over TLS (`GRPC_SERVER_USE_TLS`): rustls with the server's certificate re-read when
//! its files change (Kubernetes rotates mounted secrets in place; the reference's
//! `src/provider/cert_provider.go` reloads them the same way), and, with
//! `GRPC_CLIENT_TLS_CACERT`, client certificates required and verified against that CA, and
//! against the name `GRPC_CLIENT_TLS_SAN` when set (the reference's `src/server/tls.go`).

use std::fmt;
use std::path::Path;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};

use crate::settings::GrpcTls;

/// How often the certificate files are looked at for a change.
const CERT_POLL: Duration = Duration::from_secs(1);

/// The TLS server configuration for `tls`; the certificate is watched until the returned
/// configuration is dropped. An error names the file that does not load.
pub(crate) fn server_config(tls: &GrpcTls) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver = Arc::new(ReloadingCert::load(tls, &provider)?);
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certs(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("GRPC_CLIENT_TLS_CACERT: {}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("GRPC_CLIENT_TLS_CACERT: {}: {e}", ca.display()))?;
            let verifier: Arc<dyn ClientCertVerifier> = match &tls.client_san {
                None => verifier,
                Some(san) => Arc::new(NamedClient {
                    inner: verifier,
                    name: ServerName::try_from(san.clone())
                        .map_err(|e| format!("GRPC_CLIENT_TLS_SAN={san:?}: {e}"))?,
                }),
            };
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config =
        builder.with_cert_resolver(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>);
    config.alpn_protocols = vec![b"h2".to_vec()];
    let config = Arc::new(config);
    resolver.watch(&config);
    Ok(config)
}

/// The server's certificate, swapped when its files change; a change that does not load is
/// logged and the certificate in force stays.
struct ReloadingCert {
    cert_path: std::path::PathBuf,
    key_path: std::path::PathBuf,
    provider: Arc<CryptoProvider>,
    /// The files' bytes as last read, and the certificate made of them.
    current: RwLock<(Vec<u8>, Arc<CertifiedKey>)>,
}

impl ReloadingCert {
    fn load(tls: &GrpcTls, provider: &Arc<CryptoProvider>) -> Result<Self, String> {
        let (bytes, key) = read_pair(&tls.cert, &tls.key, provider)?;
        Ok(Self {
            cert_path: tls.cert.clone(),
            key_path: tls.key.clone(),
            provider: Arc::clone(provider),
            current: RwLock::new((bytes, Arc::new(key))),
        })
    }

    /// Looks at the files every second, on a task that ends with `config`.
    fn watch(self: &Arc<Self>, config: &Arc<ServerConfig>) {
        let (this, config): (Arc<Self>, Weak<ServerConfig>) =
            (Arc::clone(self), Arc::downgrade(config));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(CERT_POLL);
            while config.strong_count() > 0 {
                tick.tick().await;
                this.reload();
            }
        });
    }

    fn reload(&self) {
        let Ok(bytes) = both_files(&self.cert_path, &self.key_path) else {
            return;
        };
        let unchanged = match self.current.read() {
            Ok(current) => current.0 == bytes,
            Err(_) => false,
        };
        if unchanged {
            return;
        }
        match read_pair(&self.cert_path, &self.key_path, &self.provider) {
            Ok((bytes, key)) => {
                if let Ok(mut current) = self.current.write() {
                    *current = (bytes, Arc::new(key));
                }
                tracing::info!(
                    "gRPC TLS certificate reloaded from {}",
                    self.cert_path.display()
                );
            }
            // Mid-rotation (a new certificate with the old key) or broken: keep the one in
            // force and look again.
            Err(e) => tracing::warn!("{e}; keeping the certificate loaded before"),
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| Arc::clone(&c.1))
    }
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert", &self.cert_path)
            .field("key", &self.key_path)
            .finish_non_exhaustive()
    }
}

/// The two files' bytes, together (what a change is judged on).
fn both_files(cert: &Path, key: &Path) -> Result<Vec<u8>, String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
    let mut bytes = read(cert)?;
    bytes.extend(read(key)?);
    Ok(bytes)
}

fn read_pair(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<(Vec<u8>, CertifiedKey), String> {
    let bytes = both_files(cert, key)?;
    let chain = certs(cert)?;
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("GRPC_SERVER_TLS_KEY: {}: {e}", key.display()))?;
    let certified = CertifiedKey::from_der(chain, private, provider).map_err(|e| {
        format!(
            "GRPC_SERVER_TLS_CERT {} and GRPC_SERVER_TLS_KEY {}: {e}",
            cert.display(),
            key.display()
        )
    })?;
    Ok((bytes, certified))
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in the file", path.display()));
    }
    Ok(certs)
}

/// A client verifier that also requires the certificate to carry a name (`GRPC_CLIENT_TLS_SAN`).
#[derive(Debug)]
struct NamedClient {
    inner: Arc<dyn ClientCertVerifier>,
    name: ServerName<'static>,
}

impl ClientCertVerifier for NamedClient {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|e| rustls::Error::General(format!("client certificate: {e}")))?;
        cert.verify_is_valid_for_subject_name(&self.name)
            .map_err(|e| rustls::Error::General(format!("client certificate name: {e}")))?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
