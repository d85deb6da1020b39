//! The machine's rules on a source held in memory: what is applied, what is reported, reads
//! that race each other or a writer; and the bounded reads of [`read_file`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

/// A configuration held in memory: the text it holds, or a read error; text that is empty or
/// starts with `bad` does not parse.
struct Text {
    now: Mutex<Result<String, String>>,
    /// How many reads fail before `now` is read (a writer mid-swap).
    failing_reads: AtomicUsize,
    /// The next read waits here once it has read.
    hold: Mutex<Option<Hold>>,
    reads: Arc<AtomicUsize>,
    parses: AtomicUsize,
    events: Mutex<Vec<String>>,
}

struct Hold {
    read: mpsc::Sender<()>,
    release: mpsc::Receiver<()>,
}

impl Default for Text {
    fn default() -> Self {
        Self {
            now: Mutex::new(Ok(String::new())),
            failing_reads: AtomicUsize::new(0),
            hold: Mutex::default(),
            reads: Arc::default(),
            parses: AtomicUsize::new(0),
            events: Mutex::default(),
        }
    }
}

impl Text {
    fn holding(text: &str) -> Self {
        let source = Self::default();
        source.set(text);
        source
    }

    fn set(&self, text: &str) {
        *self.now.lock().unwrap() = Ok(text.to_owned());
    }

    fn unreadable(&self, why: &str) {
        *self.now.lock().unwrap() = Err(why.to_owned());
    }

    /// The events reported since the last call.
    fn events(&self) -> Vec<String> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

impl Source for Text {
    type Snapshot = String;
    type Config = String;
    type Error = String;

    fn read(&self) -> Result<String, String> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let failing = self.failing_reads.load(Ordering::Relaxed);
        if failing > 0 {
            self.failing_reads.store(failing - 1, Ordering::Relaxed);
            return Err("mid-swap".into());
        }
        let read = self.now.lock().unwrap().clone();
        let hold = self.hold.lock().unwrap().take();
        if let Some(hold) = hold {
            hold.read.send(()).unwrap();
            hold.release.recv().unwrap();
        }
        read
    }

    fn parse(&self, text: &String) -> Result<String, String> {
        self.parses.fetch_add(1, Ordering::Relaxed);
        match text.as_str() {
            "" => Err("empty".into()),
            bad if bad.starts_with("bad") => Err("bad".into()),
            good => Ok(good.to_owned()),
        }
    }

    fn report(&self, event: Event<'_, String, String>) {
        let event = match event {
            Event::Failed(e) => format!("failed: {e}"),
            Event::Applied(text) => format!("applied: {text}"),
            Event::Recovered => "recovered".into(),
        };
        self.events.lock().unwrap().push(event);
    }
}

fn reloaded(text: &str) -> Reloaded<Text> {
    Reloaded::new(Text::holding(text)).unwrap()
}

fn current(reloaded: &Reloaded<Text>) -> String {
    reloaded.current().to_string()
}

#[test]
fn a_change_is_applied_once_and_an_unchanged_snapshot_is_not_parsed_again() {
    let config = reloaded("one");
    let text = config.source();
    assert_eq!(current(&config), "one");
    (0..3).for_each(|_| config.poll());
    assert_eq!(text.parses.load(Ordering::Relaxed), 1);
    assert_eq!(text.events(), Vec::<String>::new());

    text.set("two");
    (0..3).for_each(|_| config.poll());
    assert_eq!(current(&config), "two");
    assert_eq!(text.parses.load(Ordering::Relaxed), 2);
    assert_eq!(text.events(), ["applied: two"]);

    // Asked, it parses and applies even the same snapshot, and that is not news.
    config.reload().unwrap();
    assert_eq!(text.parses.load(Ordering::Relaxed), 3);
    assert_eq!(text.events(), Vec::<String>::new());
    // A change read by `reload` is news as the watcher's is.
    text.set("three");
    config.reload().unwrap();
    assert_eq!(current(&config), "three");
    assert_eq!(text.events(), ["applied: three"]);
}

#[test]
fn each_distinct_failure_is_reported_once_and_the_last_good_stays() {
    let config = reloaded("good");
    let text = config.source();
    text.set("bad");
    (0..4).for_each(|_| config.poll());
    text.unreadable("gone");
    (0..4).for_each(|_| config.poll());
    text.set("");
    (0..4).for_each(|_| config.poll());
    assert_eq!(
        text.events(),
        ["failed: bad", "failed: gone", "failed: empty"]
    );
    assert_eq!(current(&config), "good");
    // A broken snapshot is parsed once, however many looks.
    assert_eq!(text.parses.load(Ordering::Relaxed), 3);

    // A success clears it: the same failure after a success is news again.
    text.set("better");
    config.poll();
    text.set("");
    config.poll();
    assert_eq!(text.events(), ["applied: better", "failed: empty"]);
}

#[test]
fn a_changed_snapshot_that_fails_the_same_way_is_reported_again() {
    let config = reloaded("good");
    let text = config.source();
    text.set("bad edit");
    (0..2).for_each(|_| config.poll());
    text.set("bad edit, again");
    (0..2).for_each(|_| config.poll());
    assert_eq!(text.events(), ["failed: bad", "failed: bad"]);
    assert_eq!(current(&config), "good");
}

#[test]
fn reload_returns_every_failure_and_reports_each_distinct_one_once() {
    let config = reloaded("good");
    let text = config.source();
    text.unreadable("gone");
    config.poll();
    assert_eq!(config.reload(), Err("gone".into()));
    assert_eq!(config.reload(), Err("gone".into()));
    text.set("bad");
    assert_eq!(config.reload(), Err("bad".into()));
    assert_eq!(config.reload(), Err("bad".into()));
    config.poll();
    assert_eq!(text.events(), ["failed: gone", "failed: bad"]);
    assert_eq!(current(&config), "good");
}

#[test]
fn the_same_snapshot_usable_again_after_a_read_failure_is_a_recovery() {
    let config = reloaded("good");
    let text = config.source();
    text.unreadable("gone");
    config.poll();
    text.set("good");
    (0..3).for_each(|_| config.poll());
    assert_eq!(text.events(), ["failed: gone", "recovered"]);
    assert_eq!(text.parses.load(Ordering::Relaxed), 1);
}

#[test]
fn a_read_that_fails_is_read_again_at_once_before_it_is_a_failure() {
    let config = reloaded("one");
    let text = config.source();
    text.set("two");
    text.failing_reads.store(1, Ordering::Relaxed);
    config.poll();
    assert_eq!(current(&config), "two");
    text.set("three");
    text.failing_reads.store(1, Ordering::Relaxed);
    config.reload().unwrap();
    assert_eq!(current(&config), "three");
    assert_eq!(text.events(), ["applied: two", "applied: three"]);
    // Two failures in a row are one.
    text.failing_reads.store(2, Ordering::Relaxed);
    assert_eq!(config.reload(), Err("mid-swap".into()));
    assert_eq!(text.events(), ["failed: mid-swap"]);
    // And at start.
    let text = Text::holding("start");
    text.failing_reads.store(1, Ordering::Relaxed);
    assert_eq!(current(&Reloaded::new(text).unwrap()), "start");
}

#[test]
fn a_slow_read_holds_up_no_other_and_is_not_applied_over_a_later_one() {
    let config = Arc::new(reloaded("one"));
    let (read, has_read) = mpsc::channel();
    let (release, released) = mpsc::channel();
    *config.source().hold.lock().unwrap() = Some(Hold {
        read,
        release: released,
    });
    config.source().set("slow");
    let slow = std::thread::spawn({
        let config = Arc::clone(&config);
        move || config.reload()
    });
    has_read.recv().unwrap();
    // While that read waits, another is read, applied and reported.
    config.source().set("fast");
    let (done, fast) = mpsc::channel();
    std::thread::spawn({
        let config = Arc::clone(&config);
        move || done.send(config.reload())
    });
    let fast = fast.recv_timeout(Duration::from_secs(5));
    assert_eq!(fast, Ok(Ok(())), "a reload waited for another's read");
    assert_eq!(current(&config), "fast");
    release.send(()).unwrap();
    // The slow read answers its caller (what it read parses) and is not applied.
    assert_eq!(slow.join().unwrap(), Ok(()));
    assert_eq!(current(&config), "fast");
    assert_eq!(config.source().events(), ["applied: fast"]);

    // Overtaken, a broken read still answers its caller, and is not reported.
    let (read, has_read) = mpsc::channel();
    let (release, released) = mpsc::channel();
    *config.source().hold.lock().unwrap() = Some(Hold {
        read,
        release: released,
    });
    config.source().set("bad");
    let slow = std::thread::spawn({
        let config = Arc::clone(&config);
        move || config.reload()
    });
    has_read.recv().unwrap();
    config.source().set("faster");
    config.poll();
    release.send(()).unwrap();
    assert_eq!(slow.join().unwrap(), Err("bad".into()));
    assert_eq!(current(&config), "faster");
    assert_eq!(config.source().events(), ["applied: faster"]);
}

#[test]
fn new_fails_and_new_or_serves_the_fallback_until_the_source_can_be_used() {
    assert_eq!(
        Reloaded::new(Text::holding("bad")).err(),
        Some("bad".into())
    );

    let (config, outcome) = Reloaded::new_or(Text::holding("bad"), "fallback".into());
    assert_eq!(outcome, Err("bad".into()));
    assert_eq!(current(&config), "fallback");
    // The failure at start counts as reported.
    (0..3).for_each(|_| config.poll());
    assert_eq!(config.source().events(), Vec::<String>::new());
    config.source().set("good");
    config.poll();
    assert_eq!(current(&config), "good");
    assert_eq!(config.source().events(), ["applied: good"]);

    // Unreadable at start: whatever is read next is a change.
    let text = Text::default();
    text.unreadable("gone");
    let (config, outcome) = Reloaded::new_or(text, "fallback".into());
    assert_eq!(outcome, Err("gone".into()));
    config.poll();
    config.source().set("");
    config.poll();
    config.source().set("good");
    config.poll();
    assert_eq!(config.source().events(), ["failed: empty", "applied: good"]);
}

#[test]
fn the_watcher_applies_changes_and_stops_once_dropped() {
    let config = Arc::new(reloaded("one"));
    let reads = Arc::clone(&config.source().reads);
    config.watch("tollgate-reload-test").unwrap();
    config.source().set("two");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while current(&config) != "two" && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(current(&config), "two");
    drop(config);
    // One look may be under way as it is dropped; none after.
    std::thread::sleep(POLL_INTERVAL + Duration::from_millis(100));
    let after = reads.load(Ordering::Relaxed);
    std::thread::sleep(POLL_INTERVAL * 2);
    assert_eq!(reads.load(Ordering::Relaxed), after);
}

/// A directory of its own under the temporary directory, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("tollgate-reload-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const NOTE: FileKind = FileKind::new("note", 8);

#[test]
fn read_file_reads_at_most_the_limit_and_says_so() {
    let dir = TempDir::new("limit");
    let path = dir.0.join("note.txt");
    std::fs::write(&path, "12345678").unwrap();
    assert_eq!(read_file(&path, &NOTE).unwrap(), b"12345678");
    std::fs::write(&path, "123456789").unwrap();
    let e = read_file(&path, &NOTE).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "cannot read note {}: it is larger than the limit of 8 bytes",
            path.display()
        )
    );
    let noted = NOTE.with_note("(a note is short)");
    let e = read_file(&path, &noted).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("it is larger than the limit of 8 bytes (a note is short)"),
        "{e}"
    );
    assert_eq!(e.kind(), crate::error::ConfigErrorKind::RulesFile);
}

#[cfg(unix)]
#[test]
fn read_file_refuses_a_named_pipe_without_waiting() {
    let dir = TempDir::new("fifo");
    let path = dir.0.join("note.txt");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(read_file(&path, &NOTE)));
    let e = rx
        .recv_timeout(Duration::from_secs(2))
        .unwrap()
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("it is a named pipe (FIFO), not a regular file"),
        "{e}"
    );
}
