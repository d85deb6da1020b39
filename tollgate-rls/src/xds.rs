//! [`XdsSource`]: rate limits from an xDS control plane instead of files, as the reference's
//! `CONFIG_TYPE=GRPC_XDS_SOTW` takes them (Envoy Gateway configures its rate limit service
//! this way). The service subscribes to `RateLimitConfig` resources over the aggregated
//! discovery service (state of the world); each set it receives is compiled as a directory of
//! YAML files is, then ACKed and put in force, or NACKed with the reason while the last good
//! configuration keeps serving. The client waits as the reference does: while it dials, it
//! tries again on gRPC's connection back-off (1 s, then ×1.6 up to 120 s, ±20 %), so a control
//! plane that starts later is reached about a second after it listens; after an established
//! stream breaks, it dials again after the [`XdsBackoff`] wait (10 s by default).

mod backoff;
mod client;
mod convert;

use std::path::PathBuf;

pub use backoff::XdsBackoff;
pub(crate) use client::{spawn, XdsTask};

/// Where an xDS control plane is and how to reach it: the reference's `CONFIG_GRPC_XDS_*`
/// settings. Give it to [`RateLimitServiceBuilder::config_xds`](super::RateLimitServiceBuilder::config_xds).
///
/// ```
/// use std::time::Duration;
/// use tollgate_rls::{RateLimitService, XdsBackoff, XdsSource, XdsTls};
///
/// # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
/// let source = XdsSource::new("envoy-gateway.envoy-gateway-system.svc:18001")
///     .node_id("envoy-ratelimit")
///     .tls(
///         XdsTls::new()
///             .identity("/certs/tls.crt", "/certs/tls.key")
///             .server_ca("/certs/ca.crt"),
///     )
///     .backoff(XdsBackoff { initial: Duration::from_secs(1), ..XdsBackoff::default() });
/// // Answers "no rate limit configuration loaded" until the first set arrives.
/// let service = RateLimitService::builder().config_xds(source).build()?;
/// service.wait_for_config().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct XdsSource {
    pub(crate) server_url: String,
    pub(crate) node_id: String,
    pub(crate) node_metadata: Vec<(String, String)>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) tls: Option<XdsTls>,
    pub(crate) backoff: XdsBackoff,
    pub(crate) max_message_size: Option<usize>,
}

impl XdsSource {
    /// The control plane at `server_url`: `host:port` (the reference's
    /// `CONFIG_GRPC_XDS_SERVER_URL`), or a URL with its `http://` or `https://` scheme. The
    /// node ID is `default` until [`node_id`](Self::node_id) says otherwise.
    pub fn new(server_url: impl Into<String>) -> Self {
        Self {
            server_url: server_url.into(),
            node_id: "default".into(),
            node_metadata: Vec::new(),
            headers: Vec::new(),
            tls: None,
            backoff: XdsBackoff::default(),
            max_message_size: None,
        }
    }

    /// The node ID the control plane keeps this service's resources under
    /// (`CONFIG_GRPC_XDS_NODE_ID`).
    pub fn node_id(mut self, id: impl Into<String>) -> Self {
        self.node_id = id.into();
        self
    }

    /// Adds a string to the node's metadata (`CONFIG_GRPC_XDS_NODE_METADATA`).
    pub fn node_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.node_metadata.push((key.into(), value.into()));
        self
    }

    /// Adds a header to the discovery stream's request
    /// (`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Reaches the control plane over TLS (`CONFIG_GRPC_XDS_SERVER_USE_TLS`).
    pub fn tls(mut self, tls: XdsTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// How long to wait before dialing again after an established stream breaks (the
    /// reference's `XDS_CLIENT_BACKOFF_*`). Dialing itself, a first connection included, tries
    /// again on gRPC's connection back-off, whatever this says.
    pub fn backoff(mut self, backoff: XdsBackoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The largest discovery response taken, in bytes (`XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`;
    /// default 4 MiB, gRPC's).
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = Some(bytes);
        self
    }
}

/// TLS towards the control plane. The files are read at every connection, so certificates
/// rotated in place are used from the next one.
#[derive(Debug, Clone, Default)]
pub struct XdsTls {
    pub(crate) identity: Option<(PathBuf, PathBuf)>,
    pub(crate) server_ca: Option<PathBuf>,
    pub(crate) server_name: Option<String>,
}

impl XdsTls {
    /// TLS checking the server against the system's root certificates, without a client
    /// certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// The client certificate chain and its key, PEM files (`CONFIG_GRPC_XDS_CLIENT_TLS_CERT`
    /// and `_KEY`): mutual TLS.
    pub fn identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// The CA certificates the server's certificate must chain to, a PEM file
    /// (`CONFIG_GRPC_XDS_SERVER_TLS_CACERT`), instead of the system's.
    pub fn server_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.server_ca = Some(path.into());
        self
    }

    /// The name the server's certificate must carry (`CONFIG_GRPC_XDS_SERVER_TLS_SAN`),
    /// instead of the URL's host.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }
}
