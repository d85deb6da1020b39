//! Log lines captured for a test's assertions, from a `tracing` subscriber of its own: on the
//! test's thread only (so the other suites of this binary, running meanwhile, add nothing), or
//! process-wide for a test that runs [`alone`](super::alone) in a process of its own (the
//! library logs from threads of its own, e.g. the rules file's watcher).

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// What a subscriber wrote, one line per event (`<time> <LEVEL> <target>: <message>`).
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<u8>>>);

/// Keeps a [`Log::on_this_thread`] subscriber in force until dropped.
pub struct ThisThread {
    _default: tracing::subscriber::DefaultGuard,
    _second: tracing::Dispatch,
}

impl Log {
    /// A subscriber at `level` for this thread until the guard is dropped. With a
    /// current-thread runtime, the servers and layers a test starts log here too.
    pub fn on_this_thread(level: tracing::Level) -> (Self, ThisThread) {
        let log = Self::default();
        let default = tracing::subscriber::set_default(log.subscriber(level));
        // tracing decides whether a callsite interests anyone when it is first hit; with one
        // subscriber registered it asks the subscriber of the thread that hits it, which for
        // another suite of this binary is none, and the callsite would be off for this test too.
        // With a second one registered, tracing asks every registered subscriber instead.
        let second = tracing::Dispatch::new(tracing_core::subscriber::NoSubscriber::default());
        (
            log,
            ThisThread {
                _default: default,
                _second: second,
            },
        )
    }

    /// The process-wide subscriber at INFO, set once: only for a test run [`alone`](super::alone)
    /// (in this binary's own process it would see every suite's lines).
    pub fn process_wide() -> Self {
        static LOG: OnceLock<Log> = OnceLock::new();
        LOG.get_or_init(|| {
            let log = Self::default();
            tracing::subscriber::set_global_default(log.subscriber(tracing::Level::INFO))
                .expect("no other process-wide subscriber");
            log
        })
        .clone()
    }

    fn subscriber(&self, level: tracing::Level) -> impl tracing::Subscriber + Send + Sync {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(level)
            .finish()
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).expect("UTF-8 log lines")
    }
}

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
