//! Real redis-servers alone: the one shared by a test binary, ones a test owns, and the
//! synchronous clients tests assert with (a connection, `redis-cli`).

use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::ports::{free_port, wait_for_port};
use crate::process::ServerProcess;

/// The URL of the Redis shared by this test binary: `TOLLGATE_REDIS_URL` (set by
/// scripts/test.sh), else a private redis-server started once and stopped when the test
/// process exits. Tests isolate themselves with a unique key prefix.
pub fn shared_redis_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") {
            return url;
        }
        let port = free_port();
        // The shell ends redis-server when our stdin closes, i.e. when this process exits.
        let script = format!(
            "redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no >/dev/null & \
             pid=$!; read _; kill $pid"
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .spawn()
            .expect("redis-server must be installed (scripts/test.sh installs it)");
        std::mem::forget(child);
        wait_for_port(port);
        format!("redis://127.0.0.1:{port}")
    })
    .clone()
}

/// A redis-server this test owns: it may stop, pause, resume and restart it (all of
/// [`ServerProcess`]'s, which it dereferences to).
#[derive(Debug)]
pub struct RedisServer(ServerProcess);

impl RedisServer {
    /// A redis-server on a free port, accepting connections.
    pub fn start() -> Self {
        let mut server = Self::not_started();
        server.launch();
        server
    }

    /// A port with no server yet, for starting one later with `launch`.
    pub fn not_started() -> Self {
        Self(ServerProcess::not_started("redis-server", |port| {
            let args = ["--port", &port.to_string(), "--bind", "127.0.0.1"];
            let args = args.into_iter().chain(["--save", "", "--appendonly", "no"]);
            args.map(str::to_owned).collect()
        }))
    }

    /// Its `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl std::ops::Deref for RedisServer {
    type Target = ServerProcess;

    fn deref(&self) -> &ServerProcess {
        &self.0
    }
}

impl std::ops::DerefMut for RedisServer {
    fn deref_mut(&mut self) -> &mut ServerProcess {
        &mut self.0
    }
}

/// A synchronous Redis connection for assertions (INFO, SCAN, TTL, SCRIPT FLUSH).
pub fn redis_connection(url: &str) -> deadpool_redis::redis::Connection {
    deadpool_redis::redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("connect to redis")
}

/// `redis-cli -p port args…`'s output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli must be installed (scripts/test.sh installs it)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `INFO commandstats` calls of one command, 0 if it never ran.
pub fn command_calls(conn: &mut deadpool_redis::redis::Connection, command: &str) -> u64 {
    let info: String = deadpool_redis::redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}
