//! The configuration in force from a [`Source`], kept whole and replaced whole, and the rule
//! for reads that race each other and for failures (the module's docs say it).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arc_swap::ArcSwap;

use super::poll;
use super::source::{Event, Source};

/// A configuration read from a [`Source`] and read again when it changes or when asked: the
/// last good one stays in force.
///
/// Reading the configuration in force ([`current`](Self::current)) takes no lock. See
/// [the module](super) for the rules it keeps and an example.
pub struct Reloaded<S: Source> {
    source: S,
    current: ArcSwap<S::Config>,
    /// Numbers the reads, so that a read overtaken by a later one is not applied.
    reads: AtomicU64,
    /// What the reads found. Locked only to compare, parse and swap, never across a read,
    /// so a read that is slow never holds up another.
    seen: Mutex<Seen<S>>,
}

/// What the reads of a source found so far.
struct Seen<S: Source> {
    /// The number of the latest read settled here.
    read: u64,
    /// The snapshot parsed last (none before the first that was read), so that the watcher
    /// parses changes only.
    parsed: Option<S::Snapshot>,
    /// Why that snapshot could not be used, if it could not.
    parsed_failure: Option<S::Error>,
    /// The failure reported last, until a read succeeds.
    reported: Option<S::Error>,
}

impl<S: Source> Seen<S> {
    fn parsed(snapshot: S::Snapshot) -> Self {
        Self {
            read: 0,
            parsed: Some(snapshot),
            parsed_failure: None,
            reported: None,
        }
    }
}

impl<S: Source> Reloaded<S> {
    /// Reads and parses `source` now: its configuration, or why it cannot be used (nothing is
    /// reported; the caller says it, e.g. as an error at start-up).
    pub fn new(source: S) -> Result<Self, S::Error> {
        let snapshot = read_twice(&source)?;
        let config = source.parse(&snapshot)?;
        Ok(Self {
            current: ArcSwap::from_pointee(config),
            source,
            reads: AtomicU64::new(0),
            seen: Mutex::new(Seen::parsed(snapshot)),
        })
    }

    /// As [`new`](Self::new), but if `source` cannot be read or used now, `fallback` is in
    /// force until it can, and the failure is returned beside it. That failure counts as
    /// reported: the watcher reports it again only after a success or another failure.
    pub fn new_or(source: S, fallback: S::Config) -> (Self, Result<(), S::Error>) {
        let (config, seen, outcome) = match read_twice(&source) {
            Err(e) => (fallback, failed(None, e.clone()), Err(e)),
            Ok(snapshot) => match source.parse(&snapshot) {
                Ok(config) => (config, Seen::parsed(snapshot), Ok(())),
                Err(e) => (fallback, failed(Some(snapshot), e.clone()), Err(e)),
            },
        };
        let reloaded = Self {
            current: ArcSwap::from_pointee(config),
            source,
            reads: AtomicU64::new(0),
            seen: Mutex::new(seen),
        };
        (reloaded, outcome)
    }

    /// The source it reads.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The configuration in force.
    pub fn current(&self) -> Arc<S::Config> {
        self.current.load_full()
    }

    /// The configuration in force, for a moment: no reference count is touched (a count
    /// every core writes would move its cache line between them). Not to be held long.
    pub(crate) fn guard(&self) -> arc_swap::Guard<Arc<S::Config>> {
        self.current.load()
    }

    /// Reads the source now, on the calling thread, and puts what it holds in force (even if
    /// unchanged); on error the configuration in force stays and the error is returned. A
    /// failure is also reported as the watcher's are: once for each distinct failure.
    ///
    /// No lock is held while it reads, so a slow read elsewhere never holds it up. Should a
    /// read that began after this one be settled first, that one stands and this one only
    /// answers its caller.
    pub fn reload(&self) -> Result<(), S::Error> {
        let (number, read) = self.read();
        self.settle(number, read, true)
    }

    /// Looks at the source once, as the watcher does every [`POLL_INTERVAL`]: a change is
    /// applied, a failure reported once.
    ///
    /// [`POLL_INTERVAL`]: super::POLL_INTERVAL
    pub fn poll(&self) {
        let (number, read) = self.read();
        // The watcher's caller is the log: what it found is reported, not returned.
        let _ = self.settle(number, read, false);
    }

    /// Looks at the source every [`POLL_INTERVAL`](super::POLL_INTERVAL) on a thread named
    /// `thread` (so no async runtime is needed), until this is dropped: the thread holds it
    /// weakly. An error is the thread's, not started.
    pub fn watch(self: &Arc<Self>, thread: &str) -> std::io::Result<()> {
        poll::poll_until_dropped(self, thread, Self::poll)
    }

    /// One read, numbered.
    fn read(&self) -> (u64, Result<S::Snapshot, S::Error>) {
        let number = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
        (number, read_twice(&self.source))
    }

    /// Settles what read `number` found, `asked` by a caller of `reload` or not: applies a
    /// change (or, asked, any good snapshot), reports what is news, and says what it came to.
    fn settle(
        &self,
        number: u64,
        read: Result<S::Snapshot, S::Error>,
        asked: bool,
    ) -> Result<(), S::Error> {
        let mut seen = self.seen();
        if number < seen.read {
            drop(seen);
            // A later read was settled first: it stands, and this one only answers its caller.
            return match asked {
                true => read.and_then(|snapshot| self.source.parse(&snapshot).map(drop)),
                false => Ok(()),
            };
        }
        seen.read = number;
        let snapshot = match read {
            Ok(snapshot) => snapshot,
            Err(e) => return self.failed(&mut seen, e, false),
        };
        let changed = seen.parsed.as_ref() != Some(&snapshot);
        if !changed && !asked {
            // The same snapshot again: what it gave the last time.
            return match seen.parsed_failure.clone() {
                Some(e) => self.failed(&mut seen, e, false),
                None => {
                    self.succeeded(&mut seen, false);
                    Ok(())
                }
            };
        }
        // Parsed once, however many looks: the snapshot and its failure, if any, are kept.
        let parsed = self.source.parse(&snapshot);
        seen.parsed = Some(snapshot);
        seen.parsed_failure = parsed.as_ref().err().cloned();
        match parsed {
            Ok(config) => {
                self.current.store(Arc::new(config));
                self.succeeded(&mut seen, changed);
                Ok(())
            }
            Err(e) => self.failed(&mut seen, e, changed),
        }
    }

    /// Reports a success when it is news: a change applied, or the first success after a
    /// failure.
    fn succeeded(&self, seen: &mut Seen<S>, changed: bool) {
        let recovered = seen.reported.take().is_some();
        match (changed, &seen.parsed) {
            (true, Some(snapshot)) => self.source.report(Event::Applied(snapshot)),
            _ if recovered => self.source.report(Event::Recovered),
            _ => {}
        }
    }

    /// Reports failure `e` when it is news: another failure than the one reported last, or
    /// one that a `changed` snapshot came to (a new edit is a new failure, even if it fails
    /// the same way).
    fn failed(&self, seen: &mut Seen<S>, e: S::Error, changed: bool) -> Result<(), S::Error> {
        if changed || seen.reported.as_ref() != Some(&e) {
            self.source.report(Event::Failed(&e));
            seen.reported = Some(e.clone());
        }
        Err(e)
    }

    fn seen(&self) -> MutexGuard<'_, Seen<S>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a start that failed leaves seen: `snapshot` (if it was read) and its failure `e`,
/// reported already.
fn failed<S: Source>(snapshot: Option<S::Snapshot>, e: S::Error) -> Seen<S> {
    Seen {
        read: 0,
        parsed_failure: snapshot.as_ref().map(|_| e.clone()),
        parsed: snapshot,
        reported: Some(e),
    }
}

/// Reads `source`, and once more at once if that fails: the first read may have met a writer
/// mid-swap (a Kubernetes ConfigMap swaps a directory of symlinks), and the second sees what
/// the swap left.
fn read_twice<S: Source>(source: &S) -> Result<S::Snapshot, S::Error> {
    source.read().or_else(|_| source.read())
}

impl<S: Source + fmt::Debug> fmt::Debug for Reloaded<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloaded")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}
