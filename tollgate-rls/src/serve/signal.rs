//! The stop signals: SIGTERM (Kubernetes, systemd), SIGINT and SIGHUP, each a graceful stop
//! as in the reference (its runner.go cancels on all three, then stops its servers).

use std::future::Future;

/// Resolves on SIGTERM, SIGINT or SIGHUP; the handlers are installed when this is called.
pub(crate) fn stop_signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate()).ok();
    let hangup = signal(SignalKind::hangup()).ok();
    let interrupt = tokio::signal::ctrl_c();
    async move {
        let received = |stream: Option<tokio::signal::unix::Signal>| async move {
            match stream {
                Some(mut stream) => {
                    stream.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = received(term) => {}
            () = received(hangup) => {}
            _ = interrupt => {}
        }
    }
}
