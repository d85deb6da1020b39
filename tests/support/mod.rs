//! Shared helpers for the integration tests: real redis-servers, real HTTP over loopback.
#![allow(dead_code, unreachable_pub)]

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::Router;

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

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

/// A unique key prefix per test, so tests can share one Redis.
pub fn unique_prefix(test: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}-{}-{}",
        std::process::id(),
        test,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "redis-server did not start on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A redis-server this test owns: it may stop, pause, resume and restart it.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    pub fn start() -> Self {
        let port = free_port();
        let mut server = Self { port, child: None };
        server.launch();
        server
    }

    /// A port with no server yet, for starting one later with `launch`.
    pub fn not_started() -> Self {
        Self {
            port: free_port(),
            child: None,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts redis-server on this port (again, after `stop`).
    pub fn launch(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test.sh installs it)");
        self.child = Some(child);
        wait_for_port(self.port);
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status()
                .expect("kill");
            assert!(status.success());
        }
    }

    /// SIGSTOP: the server keeps its socket but answers nothing.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.resume();
        self.stop();
    }
}

/// A synchronous Redis connection for assertions (INFO, SCAN, TTL, SCRIPT FLUSH).
pub fn redis_connection(url: &str) -> deadpool_redis::redis::Connection {
    deadpool_redis::redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("connect to redis")
}

/// Serves `app` on a free loopback port, with the peer address available to key extractors.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// An HTTP client over loopback.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("http client")
}
