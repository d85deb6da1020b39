//! The stop signals: SIGTERM (Kubernetes, systemd) and SIGINT.

use std::future::Future;

/// Resolves on SIGTERM or SIGINT; the handlers are installed when this is called.
pub(crate) fn stop_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let interrupt = tokio::signal::ctrl_c();
    async move {
        #[cfg(unix)]
        if let Some(mut term) = term {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt => {}
            }
            return;
        }
        let _ = interrupt.await;
    }
}
