//! What a configuration that reloads is: how one snapshot of it is read, what it means, and
//! how what happens to it is told.

use std::fmt;

/// How a configuration that reloads is read and built: one implementation for each kind of
/// configuration (a file, a directory of files), given to [`Reloaded`](super::Reloaded).
///
/// See [the module](super) for an example.
pub trait Source: Send + Sync + 'static {
    /// What one read finds: a file's bytes, the files of a directory. Compared with the
    /// snapshot parsed last, so that the watcher parses only a change.
    type Snapshot: PartialEq + Send + 'static;

    /// The configuration built from a snapshot, shared with its readers as an `Arc`.
    type Config: Send + Sync + 'static;

    /// Why a snapshot cannot be read or used. Compared with the failure reported last, so
    /// that each distinct failure is reported once.
    type Error: Clone + PartialEq + fmt::Display + Send + 'static;

    /// Reads one snapshot. It runs on the watcher's thread and on the thread of each caller
    /// of [`reload`](super::Reloaded::reload), several at once, with no lock held: it must
    /// not wait without bound. Read files with [`read_file`](super::read_file).
    fn read(&self) -> Result<Self::Snapshot, Self::Error>;

    /// Builds the configuration a snapshot holds, or says why it cannot be used.
    fn parse(&self, snapshot: &Self::Snapshot) -> Result<Self::Config, Self::Error>;

    /// Tells what a read came to: log it, count it. Called once for each distinct failure,
    /// and once for each change applied, never at every look.
    ///
    /// By default a failure is logged at WARN and the rest at INFO, with the target
    /// `tollgate::reload`.
    fn report(&self, event: Event<'_, Self::Snapshot, Self::Error>) {
        match event {
            Event::Failed(e) => tracing::warn!(
                target: "tollgate::reload",
                "{e}; keeping the configuration loaded before"
            ),
            Event::Applied(_) => {
                tracing::info!(target: "tollgate::reload", "configuration reloaded")
            }
            Event::Recovered => tracing::info!(
                target: "tollgate::reload",
                "the configuration can be read again; the one in force is its own"
            ),
        }
    }
}

/// What a read of a [`Source`] came to, when it is news: see [`Source::report`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a, S, E> {
    /// A failure different from the last one reported, or one from a snapshot not parsed
    /// before. The configuration in force stays.
    Failed(&'a E),
    /// This snapshot, changed since the last one parsed, is now in force.
    Applied(&'a S),
    /// After a failure, the snapshot in force is read again unchanged and still usable.
    Recovered,
}
