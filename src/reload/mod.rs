//! Configuration that reloads while the program runs: the rules file, the YAML directory of
//! `tollgate-rls`, or a file of your own.
//!
//! A [`Source`] says how one snapshot is read (a file's bytes, a directory's files) and what it
//! means (the configuration built from it). [`Reloaded`] keeps the configuration in force,
//! replaced whole and read without a lock; [`Reloaded::watch`] looks for changes every
//! [`POLL_INTERVAL`] on a thread of its own (polling sees editors that replace a file, network
//! filesystems and Kubernetes ConfigMap swaps alike), and [`Reloaded::reload`] reads now, e.g.
//! on SIGHUP. [`read_file`] reads a file the way a source should: bounded, never waiting.
//!
//! ```
//! use std::path::PathBuf;
//! use std::sync::Arc;
//!
//! use tollgate::reload::{read_file, FileKind, Reloaded, Source};
//! use tollgate::ConfigError;
//!
//! /// A file that holds the greeting to serve.
//! #[derive(Debug)]
//! struct GreetingFile(PathBuf);
//!
//! const GREETING: FileKind = FileKind::new("greeting file", 4096);
//!
//! impl Source for GreetingFile {
//!     type Snapshot = Vec<u8>;
//!     type Config = String;
//!     type Error = ConfigError;
//!
//!     fn read(&self) -> Result<Vec<u8>, ConfigError> {
//!         read_file(&self.0, &GREETING)
//!     }
//!
//!     fn parse(&self, bytes: &Vec<u8>) -> Result<String, ConfigError> {
//!         let fail = |why: &str| ConfigError::new(format!("{}: {why}", self.0.display()));
//!         let text = std::str::from_utf8(bytes).map_err(|_| fail("not UTF-8"))?;
//!         match text.trim() {
//!             "" => Err(fail("no greeting")),
//!             greeting => Ok(greeting.to_owned()),
//!         }
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("tollgate-reload-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! let path = dir.join("greeting.txt");
//! std::fs::write(&path, "hello")?;
//! // At start-up any problem is an error.
//! let greeting = Arc::new(Reloaded::new(GreetingFile(path.clone()))?);
//! // Changes apply within half a second, until `greeting` is dropped.
//! greeting.watch("greeting-reload")?;
//! assert_eq!(*greeting.current(), "hello");
//!
//! // A change that cannot be used is reported once (a WARN), and the last good one stays.
//! std::fs::write(&path, "")?;
//! assert!(greeting.reload().is_err());
//! assert_eq!(*greeting.current(), "hello");
//!
//! std::fs::write(&path, "bonjour")?;
//! greeting.reload()?;
//! assert_eq!(*greeting.current(), "bonjour");
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! # Racing reads and failures
//!
//! The rules file and the `rls` directory each had a machine of their own, with different
//! rules; this one keeps the stricter of each:
//!
//! - **Reads that race each other** (the watcher and callers of `reload`). The `rls` held one
//!   lock across reading and applying, so a read that stalled (a network filesystem) held up
//!   every other; the rules file held none while reading and numbered its reads. Kept: no lock
//!   is held across a read, and what the reads found is settled in the order they began: a
//!   read overtaken by a later one that settled first is never applied (it only answers its
//!   own caller). Parsing and swapping are done one at a time.
//! - **A read that races a writer.** The `rls` watcher read again at once before calling a
//!   read a failure (a ConfigMap swap may remove a file between listing and reading); the rules
//!   file did not. Kept, for every read (at start, the watcher's, `reload`'s): a read is a
//!   failure only if a second read at once fails too.
//! - **Which failures are reported.** The rules file reported a failure when it differed from
//!   the last one reported; the `rls` also when it came from changed files, even with the same
//!   message. Kept, both: a failure is reported (through [`Source::report`]) when it differs
//!   from the last one reported or when a snapshot not parsed before came to it; a success
//!   clears it, so the same failure after a success is reported again. A failure of `reload`
//!   follows the same rule (the `rls` reported every one): its caller has the error anyway,
//!   and the counters of the rules file count each distinct failure once.
//! - **Which successes are reported.** A changed snapshot put in force is reported, whoever
//!   read it (the rules file's `reload` used to say nothing); so is the first success after a
//!   failure. An unchanged snapshot that `reload` puts back is not news.
//! - **What counts as unchanged.** A snapshot equal to the last one parsed: the watcher
//!   neither parses it again nor reports its outcome twice. Before the first snapshot is read
//!   (a start that failed to read), every snapshot is a change.
//! - **At start-up.** [`Reloaded::new`] returns any failure (the rules file's way);
//!   [`Reloaded::new_or`] serves a fallback until the source can be used and counts the
//!   failure as reported (the `rls`'s `FORCE_START_WITHOUT_INITIAL_CONFIG`).

mod file;
mod poll;
mod reloaded;
mod source;
#[cfg(test)]
mod tests;

pub use file::{read_file, FileKind};
pub use poll::POLL_INTERVAL;
pub use reloaded::Reloaded;
pub use source::{Event, Source};
