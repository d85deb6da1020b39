//! [`RedisOptions`] and [`RedisTls`]: how a [`RedisStore`](super::RedisStore) connects, beyond
//! what its URLs say — credentials for addresses that carry none, the pool's size, and TLS with
//! a private CA, a client certificate, or a certificate whose name does not match the address.

use std::fmt;

/// How a store made by [`RedisStore::with_options`](super::RedisStore::with_options) (and its
/// Sentinel and Cluster siblings) connects.
///
/// ```
/// use tollgate::store::{RedisOptions, RedisStore};
///
/// let options = RedisOptions::new().password("s3cret").pool_size(16);
/// let store = RedisStore::with_options("redis://10.0.0.5:6379", &options)?;
/// # let _ = store;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Default)]
pub struct RedisOptions {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) pool_size: Option<usize>,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<RedisTls>,
}

impl RedisOptions {
    /// No options: each URL says everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// The password sent with `AUTH` to every Redis the store talks to (the standalone server,
    /// each cluster node, the master the sentinels name) whose URL carries no password. The
    /// sentinels themselves take theirs from their own URLs.
    #[must_use]
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The ACL user sent with the [`password`](Self::password) (Redis 6 and later).
    #[must_use]
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// The most connections the store's pool opens (deadpool's default, four per CPU, when not
    /// set; at least one). The store carries its calls on one multiplexed connection taken
    /// from the pool and takes another only when that one breaks.
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = Some(size.max(1));
        self
    }

    /// TLS settings for `rediss://` addresses (feature `tls`).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    #[must_use]
    pub fn tls(mut self, tls: RedisTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// `(username, password)` for an address whose URL carries no password.
    pub(crate) fn credentials(&self) -> Option<(Option<&str>, &str)> {
        let password = self.password.as_deref()?;
        Some((self.username.as_deref(), password))
    }
}

impl fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("RedisOptions");
        s.field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("pool_size", &self.pool_size);
        #[cfg(feature = "tls")]
        s.field("tls", &self.tls);
        s.finish()
    }
}

/// TLS for `rediss://` addresses: which certificate authorities to trust, a client certificate
/// for servers that ask for one (`tls-auth-clients yes`), and whether a certificate whose name
/// does not match the address is accepted (feature `tls`).
///
/// Every setting applies to each Redis the store talks to and, under Sentinel, to the
/// sentinels too.
///
/// ```no_run
/// use tollgate::store::{RedisOptions, RedisStore, RedisTls};
///
/// let tls = RedisTls::new()
///     .root_certificates(std::fs::read("/etc/redis/ca.pem")?)
///     .client_certificate(std::fs::read("/etc/redis/client.pem")?, std::fs::read("/etc/redis/client.key")?);
/// let store = RedisStore::with_options("rediss://redis.internal:6380", &RedisOptions::new().tls(tls))?;
/// # let _ = store;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
#[derive(Clone, Default)]
pub struct RedisTls {
    pub(crate) root_certificates: Option<Vec<u8>>,
    pub(crate) client_certificate: Option<(Vec<u8>, Vec<u8>)>,
    pub(crate) skip_hostname_verification: bool,
}

#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
impl RedisTls {
    /// The system's root certificates, no client certificate, the name checked.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the certificate authorities in `pem` (one or more PEM certificates) instead of
    /// the system's roots: for a Redis whose certificate a private CA signed.
    #[must_use]
    pub fn root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_certificates = Some(pem.into());
        self
    }

    /// Presents this certificate chain and private key (both PEM) to servers that ask for one
    /// (mutual TLS).
    #[must_use]
    pub fn client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_certificate = Some((certificate_pem.into(), key_pem.into()));
        self
    }

    /// Accepts a certificate whose names do not include the address connected to, as long as
    /// a trusted authority signed it and it is in date: for servers reached by an address
    /// their certificate does not name (an IP, a Sentinel's answer). Everything else is still
    /// checked; a `#insecure` URL is what turns every check off.
    #[must_use]
    pub fn skip_hostname_verification(mut self, skip: bool) -> Self {
        self.skip_hostname_verification = skip;
        self
    }
}

#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
impl fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTls")
            .field("root_certificates", &self.root_certificates.is_some())
            .field("client_certificate", &self.client_certificate.is_some())
            .field(
                "skip_hostname_verification",
                &self.skip_hostname_verification,
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_password() {
        let options = RedisOptions::new()
            .username("app")
            .password("hunter2")
            .pool_size(0);
        let debug = format!("{options:?}");
        assert!(
            !debug.contains("hunter2") && debug.contains("***"),
            "{debug}"
        );
        assert_eq!(options.pool_size, Some(1));
        assert_eq!(options.credentials(), Some((Some("app"), "hunter2")));
    }
}
