//! What tollgate's tests share: real redis-servers (alone, in a cluster, behind sentinels, over
//! TLS), free loopback ports, HTTP clients, captured logs. Used by the library's unit tests, its
//! integration tests and tollgate-rls's.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::Router;

pub mod dns;
pub mod log;
pub mod memcached;
mod process;

pub use process::ServerProcess;

/// Set in a process started by [`alone`]: the name of the test it runs.
const ALONE: &str = "TOLLGATE_TEST_ALONE";

/// Runs `body`, the test `name` (its path in this binary: `suite::test`), alone in a process of
/// its own, for a test that reads process-wide state the other suites of this binary would add
/// to while it runs: a global `tracing` subscriber or metrics recorder, which the library's own
/// threads (the rules file's watcher) report to. Here it runs this test binary again with only
/// `name`, and passes if that run ran it and it passed; in that process it runs `body`.
pub fn alone(name: &str, body: impl FnOnce()) {
    if std::env::var(ALONE).as_deref() == Ok(name) {
        body();
        return;
    }
    let binary = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(binary)
        .args([name, "--exact", "--test-threads", "1"])
        .env(ALONE, name)
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name}, alone in a process of its own:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs `test` on a current-thread runtime: for a test run [`alone`], whose body is not async.
pub fn block_on(test: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(test);
}

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

pub fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "no server started on port {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A redis-server this test owns: it may stop, pause, resume and restart it (all of
/// [`ServerProcess`]'s, which it dereferences to).
pub struct RedisServer(ServerProcess);

impl RedisServer {
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

/// A port below 55536 that is free, and whose cluster bus port (port + 10000) is free too.
pub fn free_cluster_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    // Spread over 21000-44999 by process, then walk on: concurrent test binaries and
    // earlier tests in this one do not collide.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = 21_000 + (std::process::id() % 240) as u16 * 100;
    for _ in 0..2_000 {
        let port = start + NEXT.fetch_add(1, Ordering::Relaxed) % 24_000;
        let port = 21_000 + (port - 21_000) % 24_000;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

/// A Redis Cluster of 3 masters and 3 replicas (`redis-cli --cluster create`), on loopback,
/// with `cluster-node-timeout 1000`: its nodes are stopped when it is dropped.
pub struct RedisCluster {
    dir: std::path::PathBuf,
    pub ports: Vec<u16>,
    children: Vec<Option<Child>>,
    /// What `redis-cli` needs to reach a node: nothing, or TLS and the password.
    cli: Vec<String>,
    /// `rediss://:password@` for a TLS cluster, else `redis://`.
    scheme: String,
}

impl RedisCluster {
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// A cluster reached only by TLS (a certificate generated for 127.0.0.1, `tls-cluster` and
    /// `tls-replication` on), every node requiring `password`.
    pub fn start_tls(password: &str) -> Self {
        Self::start_with(Some(password))
    }

    fn start_with(password: Option<&str>) -> Self {
        let ports: Vec<u16> = (0..6).map(|_| free_cluster_port()).collect();
        let dir = std::env::temp_dir().join(format!(
            "tollgate-cluster-{}-{}",
            std::process::id(),
            ports[0]
        ));
        std::fs::create_dir_all(&dir).expect("cluster directory");
        let mut tls_args: Vec<String> = Vec::new();
        let mut cli: Vec<String> = Vec::new();
        if let Some(password) = password {
            make_certificate(&dir);
            let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
            for arg in [
                "--tls-cluster",
                "yes",
                "--tls-replication",
                "yes",
                "--tls-auth-clients",
                "no",
                "--tls-cert-file",
                &file("cert.pem"),
                "--tls-key-file",
                &file("key.pem"),
                "--tls-ca-cert-file",
                &file("cert.pem"),
                "--requirepass",
                password,
                "--masterauth",
                password,
            ] {
                tls_args.push(arg.to_owned());
            }
            for arg in [
                "--tls",
                "--cacert",
                &file("cert.pem"),
                "-a",
                password,
                "--no-auth-warning",
            ] {
                cli.push(arg.to_owned());
            }
        }
        let children = ports
            .iter()
            .map(|port| {
                let node_dir = dir.join(port.to_string());
                std::fs::create_dir_all(&node_dir).expect("node directory");
                let port_args = match password {
                    Some(_) => vec![
                        "--port".to_owned(),
                        "0".to_owned(),
                        "--tls-port".to_owned(),
                        port.to_string(),
                    ],
                    None => vec!["--port".to_owned(), port.to_string()],
                };
                let child = Command::new("redis-server")
                    .args(&port_args)
                    .args(&tls_args)
                    .args(["--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
                    .args(["--cluster-config-file", "nodes.conf"])
                    .arg("--dir")
                    .arg(&node_dir)
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("redis-server must be installed (scripts/test.sh installs it)");
                Some(child)
            })
            .collect();
        let scheme = match password {
            Some(password) => format!("rediss://:{password}@"),
            None => "redis://".to_owned(),
        };
        let cluster = Self {
            dir,
            ports,
            children,
            cli,
            scheme,
        };
        for &port in &cluster.ports {
            wait_for_port(port);
        }
        let nodes: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let output = Command::new("redis-cli")
            .args(&cluster.cli)
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed (scripts/test.sh installs it)");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        cluster.wait_until_ok();
        cluster
    }

    /// The seed URLs of every node (`rediss://:password@…/#insecure` for a TLS cluster).
    pub fn urls(&self) -> Vec<String> {
        let insecure = if self.cli.is_empty() {
            ""
        } else {
            "/#insecure"
        };
        self.ports
            .iter()
            .map(|p| format!("{}127.0.0.1:{p}{insecure}", self.scheme))
            .collect()
    }

    /// `redis-cli -p port args…` on a node of this cluster.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let mut all: Vec<&str> = self.cli.iter().map(String::as_str).collect();
        all.extend(args);
        redis_cli(port, &all)
    }

    /// Waits until every running node reports `cluster_state:ok` with all slots served, and
    /// every replica has synced with its master (a replica that never synced refuses to
    /// take over).
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = self.running_ports().iter().all(|&port| {
                let info = self.cli(port, &["cluster", "info"]);
                let replication = self.cli(port, &["info", "replication"]);
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn running_ports(&self) -> Vec<u16> {
        self.ports
            .iter()
            .zip(&self.children)
            .filter(|(_, c)| c.is_some())
            .map(|(p, _)| *p)
            .collect()
    }

    /// Client keys whose slots are served by three different masters, one per master.
    pub fn keys_on_every_master(&self, name: &str) -> Vec<String> {
        let mut keys: Vec<(u16, String)> = Vec::new();
        for i in 0.. {
            let key = format!("{name}-{i}");
            let master = self.master_of(&format!("{{{key}}}"));
            if keys.iter().all(|(m, _)| *m != master) {
                keys.push((master, key));
            }
            if keys.len() == 3 {
                break;
            }
        }
        keys.into_iter().map(|(_, k)| k).collect()
    }

    /// The port of the master that serves `key`'s slot now, as a running node sees it.
    pub fn master_of(&self, key: &str) -> u16 {
        let port = self.running_ports()[0];
        let slot: u16 = self
            .cli(port, &["cluster", "keyslot", key])
            .trim()
            .parse()
            .expect("CLUSTER KEYSLOT");
        let nodes = self.cli(port, &["cluster", "nodes"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                match (low.parse::<u16>(), high.parse::<u16>()) {
                    (Ok(low), Ok(high)) => (low..=high).contains(&slot),
                    _ => false,
                }
            });
            if serves {
                let address = fields[1].split('@').next().unwrap_or_default();
                return address
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .expect("node port");
            }
        }
        panic!("no master serves slot {slot}:\n{nodes}");
    }

    /// SIGKILL to the node on `port`.
    pub fn kill(&mut self, port: u16) {
        let index = self.ports.iter().position(|p| *p == port).expect("a node");
        if let Some(mut child) = self.children[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().filter_map(Option::take) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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

/// A process stopped (SIGKILL) when dropped, with a directory removed then.
pub struct Spawned {
    child: Child,
    dir: std::path::PathBuf,
}

impl Spawned {
    /// Starts `program args…` in the fresh directory `dir` and waits until `port` accepts
    /// connections.
    pub fn start(program: &str, args: &[&str], dir: std::path::PathBuf, port: u16) -> Self {
        let child = Command::new(program)
            .args(args)
            .current_dir(&dir)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{program} must be installed: {e}"));
        wait_for_port(port);
        Self { child, dir }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh, empty temporary directory for one test.
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_prefix(name));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

/// `text` in a file `rules.toml` of a temporary directory of its own.
pub fn rules_file(test: &str, text: impl AsRef<[u8]>) -> std::path::PathBuf {
    let path = temp_dir(test).join("rules.toml");
    std::fs::write(&path, text).expect("the rules file written");
    path
}

/// A master, its replica and one sentinel (quorum 1, `down-after-milliseconds 1000`)
/// watching it as `tollgate`, on loopback; stopped when dropped.
pub struct RedisSentinel {
    pub master_port: u16,
    pub replica_port: u16,
    pub sentinel_port: u16,
    master: Option<Spawned>,
    _replica: Spawned,
    _sentinel: Spawned,
}

impl RedisSentinel {
    pub const MASTER_NAME: &'static str = "tollgate";

    pub fn start() -> Self {
        let (master_port, replica_port, sentinel_port) = (free_port(), free_port(), free_port());
        let server = |port: u16, extra: &[&str]| {
            let port_arg = port.to_string();
            let mut args = vec!["--port", &port_arg, "--bind", "127.0.0.1", "--save", ""];
            args.extend(["--appendonly", "no"]);
            args.extend(extra);
            Spawned::start("redis-server", &args, temp_dir("sentinel-node"), port)
        };
        let master = server(master_port, &[]);
        let master_arg = master_port.to_string();
        let replica = server(replica_port, &["--replicaof", "127.0.0.1", &master_arg]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !redis_cli(replica_port, &["info", "replication"]).contains("master_link_status:up") {
            assert!(Instant::now() < deadline, "the replica did not sync");
            std::thread::sleep(Duration::from_millis(50));
        }
        let dir = temp_dir("sentinel");
        let config = format!(
            "port {sentinel_port}\nbind 127.0.0.1\n\
             sentinel monitor {name} 127.0.0.1 {master_port} 1\n\
             sentinel down-after-milliseconds {name} 1000\n\
             sentinel failover-timeout {name} 5000\n",
            name = Self::MASTER_NAME
        );
        std::fs::write(dir.join("sentinel.conf"), config).expect("sentinel.conf");
        let sentinel = Spawned::start(
            "redis-server",
            &["sentinel.conf", "--sentinel"],
            dir,
            sentinel_port,
        );
        // The sentinel has found the replica (it will promote it).
        let deadline = Instant::now() + Duration::from_secs(15);
        while !redis_cli(sentinel_port, &["sentinel", "replicas", Self::MASTER_NAME])
            .contains(&replica_port.to_string())
        {
            assert!(
                Instant::now() < deadline,
                "the sentinel did not find the replica"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            master_port,
            replica_port,
            sentinel_port,
            master: Some(master),
            _replica: replica,
            _sentinel: sentinel,
        }
    }

    pub fn sentinel_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.sentinel_port)
    }

    /// SIGKILL to the master.
    pub fn kill_master(&mut self) {
        self.master = None;
    }
}

/// A redis-server with a TLS port (a self-signed certificate for 127.0.0.1) and a plain port,
/// both requiring the password `s3cret-pw`, and an ACL user `app` with password `app-pw`.
pub struct SecureRedis {
    pub tls_port: u16,
    pub plain_port: u16,
    _server: Spawned,
}

impl SecureRedis {
    pub fn start() -> Self {
        let dir = temp_dir("tls");
        make_certificate(&dir);
        let (tls_port, plain_port) = (free_port(), free_port());
        let (tls, plain) = (tls_port.to_string(), plain_port.to_string());
        let server = Spawned::start(
            "redis-server",
            &[
                "--port",
                &plain,
                "--tls-port",
                &tls,
                "--bind",
                "127.0.0.1",
                "--tls-cert-file",
                "cert.pem",
                "--tls-key-file",
                "key.pem",
                "--tls-ca-cert-file",
                "cert.pem",
                "--tls-auth-clients",
                "no",
                "--requirepass",
                "s3cret-pw",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            dir,
            tls_port,
        );
        wait_for_port(plain_port);
        let created = redis_cli(
            plain_port,
            &[
                "-a",
                "s3cret-pw",
                "--no-auth-warning",
                "acl",
                "setuser",
                "app",
                "on",
                ">app-pw",
                "~*",
                "+@all",
            ],
        );
        assert_eq!(created.trim(), "OK");
        Self {
            tls_port,
            plain_port,
            _server: server,
        }
    }
}

/// A self-signed certificate for 127.0.0.1, `cert.pem` and `key.pem` in `dir` (openssl).
pub fn make_certificate(dir: &std::path::Path) {
    let status = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes"])
        .args(["-keyout", "key.pem", "-out", "cert.pem", "-days", "1"])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .current_dir(dir)
        .output()
        .expect("openssl must be installed (scripts/test.sh installs it)")
        .status;
    assert!(status.success(), "openssl could not make a certificate");
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
