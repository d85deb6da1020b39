//! A rules file that fails while serving, over real HTTP: a named pipe, a device, a file too
//! large, a file deleted or replaced by a directory or a dangling symlink. Reading never
//! blocks, the last good rules keep limiting, each distinct failure is logged once at WARN
//! and counted, and recovery is logged.
//!
//! The watcher logs and counts from a thread of its own, so it reports to the process-wide
//! subscriber and recorder: the tests that read them run [`support::alone`], where no other
//! suite logs or fails a reload meanwhile.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use support::log::Log;
use tollgate::rules::MAX_FILE_BYTES;
use tollgate::{ConfigError, RateLimitLayer};

/// The log lines that mention `path`.
fn lines_about(log: &Log, path: &Path) -> Vec<String> {
    let path = path.display().to_string();
    log.text()
        .lines()
        .filter(|line| line.contains(&path))
        .map(str::to_owned)
        .collect()
}

/// The process-wide metrics recorder: only for a test run [`support::alone`].
fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).expect("the only recorder");
        handle
    })
}

fn reload_failures() -> f64 {
    let text = recorder().render();
    text.lines()
        .find_map(|line| line.strip_prefix("tollgate_rules_reload_failures_total "))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

const GOOD: &str =
    "[defaults]\nkey = \"global\"\n\n[[rule]]\nname = \"api\"\npath = \"/api\"\nquota = \"2/min\"\n";

/// Serves `layer` over `/api`: the address.
async fn serve(layer: RateLimitLayer) -> SocketAddr {
    support::serve(
        Router::new()
            .route("/api", get(|| async { "api" }))
            .layer(layer),
    )
    .await
}

async fn status(addr: SocketAddr) -> u16 {
    let r = support::client()
        .get(format!("http://{addr}/api"))
        .send()
        .await
        .unwrap();
    r.status().as_u16()
}

/// Runs `f` on a thread of its own and waits at most `limit` for it: `None` if it is still
/// running then (the thread is left behind, so a test that hangs fails instead).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success());
}

fn replace_with(path: &Path, make: impl FnOnce(&Path)) {
    if path.is_dir() {
        std::fs::remove_dir(path).unwrap();
    } else {
        let _ = std::fs::remove_file(path);
    }
    make(path);
}

#[test]
fn a_named_pipe_in_place_of_the_rules_file_never_blocks_a_reload() {
    support::alone(
        "rules_file_faults::a_named_pipe_in_place_of_the_rules_file_never_blocks_a_reload",
        || support::block_on(a_named_pipe()),
    );
}

async fn a_named_pipe() {
    let failures = recorder();
    let log = Log::process_wide(tracing::Level::INFO);
    let path = support::rules_file("fifo", GOOD);
    let layer = RateLimitLayer::from_rules_file(&path).unwrap();
    let control = layer.control();
    let addr = serve(layer).await;
    assert_eq!(
        [status(addr).await, status(addr).await, status(addr).await],
        [200, 200, 429]
    );
    assert_eq!(reload_failures(), 0.0, "{}", failures.render());

    // A pipe nobody writes to: opening it to read would wait for a writer forever.
    replace_with(&path, mkfifo);
    // Let the watcher look at it first: it must not hold the lock a reload needs while it waits.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let reloaded = within(Duration::from_secs(2), move || control.reload_rules());
    let e = reloaded
        .expect("reload_rules returned within 2 s")
        .unwrap_err();
    let message = e.to_string();
    assert_eq!(
        message,
        format!(
            "cannot read rules file {}: it is a named pipe (FIFO), not a regular file (only \
             a regular file, or a symlink to one, is read)",
            path.display()
        )
    );
    // The last good rules keep limiting.
    assert_eq!(status(addr).await, 429);
    // The watcher reported it once, however many times it looked.
    let warnings: Vec<_> = lines_about(&log, &path)
        .into_iter()
        .filter(|l| l.contains(" WARN ") && l.contains("named pipe"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].ends_with("; keeping the rules loaded before"),
        "{warnings:#?}"
    );
    assert_eq!(reload_failures(), 1.0);

    // At start-up a pipe is a ConfigError at once.
    let fifo = path.clone();
    let started = within(Duration::from_secs(2), move || {
        RateLimitLayer::from_rules_file(&fifo).map(drop)
    });
    let e = started.expect("build returned within 2 s").unwrap_err();
    assert_eq!(e.kind(), tollgate::ConfigErrorKind::RulesFile);
    assert!(e.to_string().contains("a named pipe (FIFO)"), "{e}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[tokio::test]
async fn a_device_a_socket_or_a_directory_is_refused_at_start_up() {
    let dir = support::rules_file("device", GOOD);
    let link = dir.with_file_name("null.toml");
    std::os::unix::fs::symlink("/dev/null", &link).unwrap();
    let e = RateLimitLayer::from_rules_file(&link).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "cannot read rules file {}: it is a character device, not a regular file (only a \
             regular file, or a symlink to one, is read)",
            link.display()
        )
    );
    // The probe's case: /dev/zero never ends (it grew a process past 1.38 GB).
    let zero = dir.with_file_name("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let e = RateLimitLayer::from_rules_file(&zero).unwrap_err();
    assert!(
        e.to_string()
            .contains("it is a character device, not a regular file"),
        "{e}"
    );
    let socket = dir.with_file_name("socket.toml");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let e = RateLimitLayer::from_rules_file(&socket).unwrap_err();
    assert!(
        e.to_string().contains("it is a socket, not a regular file"),
        "{e}"
    );
    let parent = dir.parent().unwrap().to_path_buf();
    let e = RateLimitLayer::from_rules_file(&parent).unwrap_err();
    assert!(
        e.to_string()
            .contains("it is a directory, not a regular file"),
        "{e}"
    );
    std::fs::remove_dir_all(parent).unwrap();
}

/// A sparse file of `len` bytes (zeros, no disk used).
fn sparse(path: &Path, len: u64) {
    let file = std::fs::File::create(path).unwrap();
    file.set_len(len).unwrap();
}

fn too_large(path: &Path) -> String {
    format!(
        "cannot read rules file {}: it is larger than the limit of 4194304 bytes (4 MiB, \
         tollgate::rules::MAX_FILE_BYTES); a rules file is a few kilobytes",
        path.display()
    )
}

#[tokio::test]
async fn a_rules_file_over_the_size_limit_is_refused() {
    assert_eq!(MAX_FILE_BYTES, 4 * 1024 * 1024);
    let path = support::rules_file("large", GOOD);
    let layer = RateLimitLayer::from_rules_file(&path).unwrap();
    let control = layer.control();
    let addr = serve(layer).await;
    assert_eq!(
        [status(addr).await, status(addr).await, status(addr).await],
        [200, 200, 429]
    );
    for len in [MAX_FILE_BYTES + 1, 64 * 1024 * 1024] {
        sparse(&path, len);
        let e: ConfigError = control.reload_rules().unwrap_err();
        assert_eq!(e.to_string(), too_large(&path), "{len} bytes");
        assert_eq!(control.rule_names(), ["api"]);
        assert_eq!(status(addr).await, 429);
        // And at start-up.
        let e = RateLimitLayer::from_rules_file(&path).unwrap_err();
        assert_eq!(e.to_string(), too_large(&path), "{len} bytes");
    }
    // Exactly the limit is read: a rule, then a comment up to MAX_FILE_BYTES.
    let rule = GOOD.replace("\"api\"", "\"api2\"");
    let padding = usize::try_from(MAX_FILE_BYTES).unwrap() - rule.len() - 2;
    let text = format!("{rule}#{}\n", "x".repeat(padding));
    assert_eq!(text.len() as u64, MAX_FILE_BYTES);
    std::fs::write(&path, text).unwrap();
    control.reload_rules().unwrap();
    assert_eq!(control.rule_names(), ["api2"]);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// Waits until the watcher has looked at the file a few times.
async fn let_the_watcher_look() {
    tokio::time::sleep(Duration::from_millis(1300)).await;
}

#[test]
fn each_failed_reload_is_logged_once_and_counted_and_recovery_is_logged() {
    support::alone(
        "rules_file_faults::each_failed_reload_is_logged_once_and_counted_and_recovery_is_logged",
        || support::block_on(failures_and_recovery()),
    );
}

async fn failures_and_recovery() {
    let failures = recorder();
    let log = Log::process_wide(tracing::Level::INFO);
    let path = support::rules_file("failures", GOOD);
    let layer = RateLimitLayer::from_rules_file(&path).unwrap();
    let control = layer.control();
    let addr = serve(layer).await;
    assert_eq!(
        [status(addr).await, status(addr).await, status(addr).await],
        [200, 200, 429]
    );
    assert_eq!(reload_failures(), 0.0, "{}", failures.render());
    let started = Instant::now();

    // Deleted, then a directory, then a dangling symlink: three failures in a row, each
    // seen by the watcher at two looks or more.
    replace_with(&path, |_| {});
    let_the_watcher_look().await;
    replace_with(&path, |p| std::fs::create_dir(p).unwrap());
    let_the_watcher_look().await;
    replace_with(&path, |p| {
        std::os::unix::fs::symlink(p.with_file_name("nowhere.toml"), p).unwrap();
    });
    let_the_watcher_look().await;
    // The limits kept working throughout.
    assert_eq!(status(addr).await, 429);
    assert_eq!(control.rule_names(), ["api"]);
    let missing = format!(
        "cannot read rules file {}: No such file or directory (os error 2); keeping the rules \
         loaded before",
        path.display()
    );
    let directory = format!(
        "cannot read rules file {}: it is a directory, not a regular file (only a regular \
         file, or a symlink to one, is read); keeping the rules loaded before",
        path.display()
    );
    let warnings: Vec<String> = lines_about(&log, &path)
        .iter()
        .filter(|l| l.contains(" WARN "))
        .map(|l| {
            l.split_once("tollgate: ")
                .map_or(l.clone(), |(_, m)| m.to_owned())
        })
        .collect();
    assert_eq!(warnings, [missing.clone(), directory, missing]);
    assert_eq!(reload_failures(), 3.0);

    // The same file again: recovery is logged, once.
    replace_with(&path, |p| std::fs::write(p, GOOD).unwrap());
    let_the_watcher_look().await;
    let infos: Vec<String> = lines_about(&log, &path)
        .into_iter()
        .filter(|l| l.contains(" INFO "))
        .collect();
    assert_eq!(infos.len(), 1, "{infos:#?}");
    assert!(
        infos[0].ends_with(&format!(
            "rules file {} can be used again; the rules in force are its rules",
            path.display()
        )),
        "{infos:#?}"
    );
    assert_eq!(reload_failures(), 3.0);
    assert_eq!(status(addr).await, 429);
    assert!(started.elapsed() < Duration::from_secs(10));
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
