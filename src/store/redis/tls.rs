//! TLS for `rediss://` URLs (the `tls` feature): rustls needs a crypto provider.

/// Installs rustls's `ring` provider as the process default, unless one is installed already.
/// redis-rs builds its TLS configuration from the process default, and rustls cannot choose
/// one by itself when the app's other crates enable a second provider.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // An error means another thread installed one first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
