//! What every accepted connection gets: `TCP_NODELAY` (a decision is a few hundred bytes; with
//! Nagle's algorithm and the peer's delayed ACKs it would wait 40 ms), TCP keepalive (a peer
//! that vanished is noticed), on the gRPC port over TLS a bounded handshake, and on the HTTP
//! ports time limits on a request's head and on the whole request (a client that trickles
//! bytes holds nothing for long).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::TcpIncoming;
use tower_http::timeout::TimeoutLayer;

/// How long an idle connection's peer may stay silent before the kernel probes it.
pub(crate) const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// How long an HTTP client may take to send a request's head.
pub(crate) const HTTP_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an HTTP request may take from its head to the end of its answer (a `/json` body
/// sent slowly included); past it the answer is 408.
pub(crate) const HTTP_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The gRPC listener's connections, with `TCP_NODELAY` and keepalive set on each.
pub(crate) fn grpc_incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(TCP_KEEPALIVE))
}

/// How long a client may take over its TLS handshake.
pub(crate) const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener gRPC is served on: TCP (`GRPC_PORT`) or a Unix socket (`GRPC_UDS`).
pub(crate) trait GrpcAccept: Send + 'static {
    /// One accepted connection.
    type Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;

    /// The next connection, tuned, and who it is from (for the log).
    fn next(&self) -> impl Future<Output = std::io::Result<(Self::Stream, String)>> + Send;
}

impl GrpcAccept for TcpListener {
    type Stream = TcpStream;

    async fn next(&self) -> std::io::Result<(TcpStream, String)> {
        let (stream, peer) = self.accept().await?;
        tune(&stream);
        Ok((stream, peer.to_string()))
    }
}

impl GrpcAccept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;

    async fn next(&self) -> std::io::Result<(tokio::net::UnixStream, String)> {
        let (stream, _) = self.accept().await?;
        Ok((stream, "a Unix socket client".to_owned()))
    }
}

/// The gRPC listener's connections over TLS (on TCP, `TCP_NODELAY` and keepalive set on
/// each), each handshake on a task of its own so that a slow client holds up no other. A
/// client that fails its handshake (no certificate, or one not signed by the CA) is logged
/// and dropped. Accepting stops when the stream is dropped.
pub(crate) fn grpc_tls_incoming<L: GrpcAccept>(
    listener: L,
    config: Arc<rustls::ServerConfig>,
) -> ReceiverStream<std::io::Result<TlsStream<L::Stream>>> {
    let (connections, incoming) = mpsc::channel(64);
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.next() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!("cannot accept a gRPC connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = connections.closed() => return,
            };
            let (acceptor, connections) = (acceptor.clone(), connections.clone());
            tokio::spawn(async move {
                let handshake =
                    tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                match handshake.await {
                    Ok(Ok(tls)) => {
                        let _ = connections.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::info!("gRPC TLS handshake with {peer} failed: {e}"),
                    Err(_) => tracing::info!("gRPC TLS handshake with {peer} timed out"),
                }
            });
        }
    });
    ReceiverStream::new(incoming)
}

/// Sets what every accepted TCP connection gets.
fn tune(stream: &TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!("cannot set TCP_NODELAY: {e}");
    }
    let keepalive = socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive) {
        tracing::debug!("cannot set TCP keepalive: {e}");
    }
}

/// Serves `app` over HTTP/1.1 (and HTTP/2 with prior knowledge) on `listener` until
/// `shutdown` resolves, then lets the requests in flight finish.
pub(crate) async fn serve_http(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let app = app.layer(TimeoutLayer::with_status_code(
        http::StatusCode::REQUEST_TIMEOUT,
        HTTP_REQUEST_TIMEOUT,
    ));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HTTP_HEADER_TIMEOUT);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment, as hyper's and
                    // axum's accept loops do, instead of spinning.
                    tracing::warn!("cannot accept an HTTP connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        tune(&stream);
        let service = TowerToHyperService::new(app.clone());
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
