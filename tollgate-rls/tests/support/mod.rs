//! Helpers for the binary's tests: the built `tollgate-rls` started on free loopback ports
//! with a configuration directory of its own, and requests. Redis servers, ports and HTTP
//! clients are the workspace's test kit's (`tollgate-test-kit`).
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate_rls::proto::rate_limit_descriptor::Entry;
use tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

pub use shared::dns::SrvServer;
pub use shared::memcached::MemcachedServer;
pub use shared::{client as http, command_calls, redis_cli, redis_connection, RedisServer};
pub use shared::{free_port, shared_redis_url, temp_dir, wait_for_port, Spawned};
use tollgate_test_kit as shared;

pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate-rls");

/// The library's test data: fixtures and the reference's integration runtime.
pub fn data(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/rls")
        .join(path)
}

/// A directory laid out as the reference expects: `<root>/ratelimit/config/`.
pub struct Runtime {
    pub root: PathBuf,
}

impl Runtime {
    /// Unique per call: tests of one binary run side by side in one process, and a shared
    /// directory would be removed under another test's feet.
    pub fn new(test: &str) -> Self {
        let root = temp_dir(&format!("rls-{test}"));
        std::fs::create_dir_all(root.join("ratelimit/config")).unwrap();
        Self { root }
    }

    /// A runtime holding copies of these files (paths under `tests/rls`).
    pub fn with(test: &str, files: &[&str]) -> Self {
        let runtime = Self::new(test);
        for file in files {
            runtime.copy(file);
        }
        runtime
    }

    pub fn config(&self) -> PathBuf {
        self.root.join("ratelimit/config")
    }

    pub fn copy(&self, file: &str) {
        let source = data(file);
        let name = source.file_name().unwrap();
        std::fs::copy(&source, self.config().join(name)).unwrap();
    }

    pub fn write(&self, name: &str, content: &str) {
        // Written aside then renamed, as deployment tools do: never half a file.
        let tmp = self.root.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, self.config().join(name)).unwrap();
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.config().join(name)).unwrap();
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A running tollgate-rls.
pub struct Rls {
    child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub debug: SocketAddr,
    /// The start-up line (`tollgate-rls listening on … store=…`).
    pub line: String,
    stderr: Arc<Mutex<String>>,
}

fn command(runtime: &Path, env: &[(&str, &str)]) -> Command {
    let bound: Vec<(&str, &str)> = [(RESOLV_CONF, "/etc/resolv.conf"), (HOSTS, "/etc/hosts")]
        .into_iter()
        .filter_map(|(var, over)| env.iter().find(|(k, _)| *k == var).map(|(_, f)| (*f, over)))
        .collect();
    let mut command = match bound.is_empty() {
        true => Command::new(BIN),
        // In a mount namespace of its own, with each file bound over the system's.
        false => {
            let mut command = Command::new("unshare");
            command.args(["--mount", "--", "sh", "-c"]);
            let mut script = String::new();
            for (i, (_, over)) in bound.iter().enumerate() {
                script.push_str(&format!(r#"mount --bind "${}" {over} && "#, i + 1));
            }
            command.arg(script + r#"exec "$0""#).arg(BIN);
            command.args(bound.iter().map(|(file, _)| file));
            command
        }
    };
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUNTIME_ROOT", runtime)
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("HOST", "127.0.0.1")
        .env("PORT", "0")
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", "0")
        .env("DEBUG_HOST", "127.0.0.1")
        .env("DEBUG_PORT", "0")
        .env("LOG_LEVEL", "info");
    for (k, v) in env.iter().filter(|(k, _)| *k != RESOLV_CONF && *k != HOSTS) {
        command.env(k, v);
    }
    // Without a store named, the memory store (tollgate's `BACKEND_TYPE=memory`): unset,
    // `BACKEND_TYPE` is the reference's `redis`, at its default socket.
    if !env
        .iter()
        .any(|(k, _)| *k == "REDIS_URL" || *k == "BACKEND_TYPE")
    {
        command.env("BACKEND_TYPE", "memory");
    }
    command
}

/// Not a variable: in a test's `env`, starts the binary seeing this file as its
/// `/etc/resolv.conf` (through `unshare --mount`, as root), to ask a test's name server.
pub const RESOLV_CONF: &str = "(resolv.conf)";

/// Not a variable: in a test's `env`, starts the binary seeing this file as its `/etc/hosts`
/// (through `unshare --mount`, as root), to resolve a name to the addresses a test chooses.
pub const HOSTS: &str = "(hosts)";

/// A started binary whose `listening on` line may not have come yet.
pub struct Starting {
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
    lines: std::sync::mpsc::Receiver<String>,
    line: Option<String>,
}

impl Starting {
    /// Whether the `listening on` line comes within `within`.
    pub fn listens_within(&mut self, within: Duration) -> bool {
        if self.line.is_none() {
            self.line = self.lines.recv_timeout(within).ok();
        }
        self.line.is_some()
    }

    /// What it logged so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits up to `within` for the `listening on` line; the running server.
    pub fn listening(mut self, within: Duration) -> Rls {
        self.listens_within(within);
        let line = self.line.take().unwrap_or_default();
        let stderr = Arc::clone(&self.stderr);
        let addr = |name: &str| -> SocketAddr {
            let found = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| {
                    panic!("no {name}= in {line:?}; stderr: {}", stderr.lock().unwrap())
                });
            found.parse().unwrap()
        };
        // gRPC on a Unix socket (`grpc=unix:PATH`) has no address.
        let grpc = match line.contains(" grpc=unix:") {
            true => SocketAddr::from(([0, 0, 0, 0], 0)),
            false => addr("grpc"),
        };
        let (http, debug) = (addr("http"), addr("debug"));
        let child = self.child.take().expect("a started child");
        Rls {
            child,
            grpc,
            http,
            debug,
            line,
            stderr,
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Rls {
    /// Starts the binary on `runtime` and waits for its `listening on` line.
    pub fn start(runtime: &Runtime, env: &[(&str, &str)]) -> Self {
        Self::spawn(runtime, env).listening(Duration::from_secs(20))
    }

    /// Starts the binary on `runtime` without waiting for it to listen.
    pub fn spawn(runtime: &Runtime, env: &[(&str, &str)]) -> Starting {
        let mut child = command(&runtime.root, env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tollgate-rls");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            if BufReader::new(stdout).read_line(&mut line).is_ok() && !line.is_empty() {
                let _ = tx.send(line);
            }
        });
        Starting {
            child: Some(child),
            stderr,
            lines,
            line: None,
        }
    }

    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it logged so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends it SIGTERM without waiting for it to exit.
    pub fn signal_stop(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// Stops it with SIGTERM and waits; its exit status.
    pub fn stop(mut self) -> ExitStatus {
        self.terminate()
    }

    /// Stops it with `signal` (`-HUP`, `-INT`, …) and waits; its exit status.
    pub fn stop_with(mut self, signal: &str) -> ExitStatus {
        self.signal_and_wait(signal)
    }

    fn terminate(&mut self) -> ExitStatus {
        self.signal_and_wait("-TERM")
    }

    fn signal_and_wait(&mut self, signal: &str) -> ExitStatus {
        let _ = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.terminate();
        }
    }
}

/// Runs the binary on `runtime` expecting it to exit by itself: its status and stderr.
pub fn run_to_exit(runtime: &Path, env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut child = command(runtime, env)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tollgate-rls");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tollgate-rls did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}

pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

pub fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend: 0,
    }
}

pub async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
}

/// The body of a GET of `url`, which must answer.
pub async fn get_text(url: impl AsRef<str>) -> String {
    http()
        .get(url.as_ref())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Polls `check` every 50 ms until it holds or `within` has passed.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
