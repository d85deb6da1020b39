//! Log lines captured for a test's assertions, from a process-wide `tracing` subscriber in a
//! test that runs [`alone`](super::alone) in a process of its own. (A subscriber for one thread
//! is not enough: `tracing` decides once, when a log statement is first reached, whether any
//! subscriber wants it, and a suite running on another thread at that moment, with no
//! subscriber, can turn the statement off for good. The library also logs from threads of its
//! own, e.g. the rules file's watcher.)

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// What a subscriber wrote, one line per event (`<time> <LEVEL> <target>: <message>`).
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<Vec<u8>>>);

impl Log {
    /// The process-wide subscriber at `level`, set once by the first call: only for a test run
    /// [`alone`](super::alone) (in this binary's own process it would see every suite's lines).
    pub fn process_wide(level: tracing::Level) -> Self {
        static LOG: OnceLock<Log> = OnceLock::new();
        LOG.get_or_init(|| {
            let log = Self::default();
            tracing::subscriber::set_global_default(log.subscriber(level))
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

/// The lines `tracing` wrote while `f` ran on this thread (a subscriber for this thread only,
/// with `tracing_subscriber::fmt`'s defaults): for unit tests that log from the calling thread.
pub fn logged(f: impl FnOnce()) -> String {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    log.text()
}
