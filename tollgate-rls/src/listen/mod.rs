//! The listeners the settings name, opened before the server says it listens: gRPC on
//! `GRPC_HOST:GRPC_PORT` (over TLS with `GRPC_SERVER_USE_TLS`, `tls.rs`) or the Unix socket
//! `GRPC_UDS`, HTTP on `HOST:PORT` and `DEBUG_HOST:DEBUG_PORT`, and with `USE_PROMETHEUS` the
//! metrics' own on `PROMETHEUS_ADDR`; and what every accepted connection gets (`accept.rs`),
//! on `GRPC_UDS` the authority C-core clients send made one h2 takes (`authority.rs`).
//!
//! Addresses are the reference's: `HOST:PORT` with a host name (`localhost`), an IPv4 or an
//! IPv6 address (`::`), or for gRPC a Unix socket path.

mod accept;
mod authority;
mod tls;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};

use crate::settings::{Prometheus, Server};

pub(crate) use accept::{grpc_incoming, grpc_tls_incoming, serve_http};
pub(crate) use authority::AuthorityFix;

/// Every listener the server serves on.
pub(crate) struct Listeners {
    pub(crate) grpc: GrpcListener,
    /// With `GRPC_SERVER_USE_TLS`: the TLS the gRPC port speaks.
    pub(crate) grpc_tls: Option<Arc<rustls::ServerConfig>>,
    /// `HOST:PORT`: health, JSON and metrics.
    pub(crate) main: TcpListener,
    /// `DEBUG_HOST:DEBUG_PORT`: the configuration in force.
    pub(crate) debug: TcpListener,
    /// `PROMETHEUS_ADDR`, and the path the metrics are served at.
    pub(crate) prometheus: Option<(TcpListener, String)>,
}

/// Where gRPC is served: `GRPC_HOST:GRPC_PORT`, or the Unix socket `GRPC_UDS`.
pub(crate) enum GrpcListener {
    Tcp(TcpListener),
    Unix(UnixListener, String),
}

/// Why the server cannot listen where the settings say.
#[derive(Debug)]
pub(crate) enum ListenError {
    /// A listener could not be opened: the variable that names it, where, and why.
    Bind {
        name: &'static str,
        address: String,
        source: std::io::Error,
    },
    /// The gRPC port's TLS does not load: which file, and why.
    Tls(String),
}

impl fmt::Display for ListenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bind {
                name,
                address,
                source,
            } => write!(f, "{name}: cannot listen on {address}: {source}"),
            Self::Tls(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ListenError {}

/// Opens the listeners `server` and `prometheus` name, and loads the gRPC port's TLS.
pub(crate) async fn bind_all(
    server: &Server,
    prometheus: Option<&Prometheus>,
) -> Result<Listeners, ListenError> {
    let grpc_tls = (server.grpc_tls.as_ref())
        .map(tls::server_config)
        .transpose()
        .map_err(ListenError::Tls)?;
    let grpc = match &server.grpc_uds {
        Some(path) => GrpcListener::Unix(bind_unix(path)?, path.display().to_string()),
        None => GrpcListener::Tcp(bind("GRPC_HOST", &server.grpc_host, server.grpc_port).await?),
    };
    let main = bind("HOST", &server.host, server.port).await?;
    let debug = bind("DEBUG_HOST", &server.debug_host, server.debug_port).await?;
    let prometheus = match prometheus {
        None => None,
        Some(p) => Some((
            bind("PROMETHEUS_ADDR", &p.host, p.port).await?,
            p.path.clone(),
        )),
    };
    Ok(Listeners {
        grpc,
        grpc_tls,
        main,
        debug,
        prometheus,
    })
}

impl GrpcListener {
    /// The address for the `listening` line: `host:port`, or `unix:PATH`.
    pub(crate) fn address(&self) -> String {
        match self {
            Self::Tcp(l) => address(l),
            Self::Unix(_, path) => format!("unix:{path}"),
        }
    }
}

/// Where `listener` listens, as `host:port` (empty if the system cannot say).
pub(crate) fn address(listener: &TcpListener) -> String {
    (listener.local_addr())
        .map(|a| a.to_string())
        .unwrap_or_default()
}

/// Listens on `host:port`: a host name is resolved and the first of its addresses that can be
/// bound is used, as Go's `net.Listen` does; an IPv6 address may be bare (`::`) or bracketed.
async fn bind(name: &'static str, host: &str, port: u16) -> Result<TcpListener, ListenError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (TcpListener::bind((host, port)).await).map_err(|source| ListenError::Bind {
        name,
        address: format!("{host:?} port {port}"),
        source,
    })
}

/// Listens on the Unix socket at `path`, replacing a socket file left by an earlier run (as
/// the reference does not, a restart would otherwise fail).
fn bind_unix(path: &Path) -> Result<UnixListener, ListenError> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    UnixListener::bind(path).map_err(|source| ListenError::Bind {
        name: "GRPC_UDS",
        address: path.display().to_string(),
        source,
    })
}
