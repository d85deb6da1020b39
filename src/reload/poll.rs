//! The thread that looks for changes to what a configuration is read from. Polling, not
//! filesystem events: it sees editors that replace files, network filesystems and Kubernetes
//! ConfigMap symlink swaps alike.

use std::sync::Arc;
use std::time::Duration;

/// How often the watcher of [`Reloaded::watch`](super::Reloaded::watch) looks: a change
/// applies within this (plus the read).
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Calls `poll` with `source` every [`POLL_INTERVAL`], on a thread named `name`, until the
/// source is dropped (the thread holds it weakly).
pub(super) fn poll_until_dropped<T: Send + Sync + 'static>(
    source: &Arc<T>,
    name: &str,
    poll: fn(&T),
) -> std::io::Result<()> {
    let source = Arc::downgrade(source);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || loop {
            std::thread::sleep(POLL_INTERVAL);
            let Some(source) = source.upgrade() else {
                return;
            };
            poll(&source);
        })
        .map(drop)
}
