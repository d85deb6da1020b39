//! [`RedisCluster`]: a Redis Cluster on loopback, plain or over TLS.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ports::{free_cluster_port, wait_for_port};
use crate::redis::redis_cli;
use crate::tls::make_certificate;

/// A Redis Cluster of 3 masters and 3 replicas (`redis-cli --cluster create`), on loopback,
/// with `cluster-node-timeout 1000`: its nodes are stopped when it is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    dir: std::path::PathBuf,
    /// The nodes' ports, masters and replicas alike.
    pub ports: Vec<u16>,
    children: Vec<Option<Child>>,
    /// What `redis-cli` needs to reach a node: nothing, or TLS and the password.
    cli: Vec<String>,
    /// `rediss://:password@` for a TLS cluster, else `redis://`.
    scheme: String,
}

impl RedisCluster {
    /// A cluster without TLS or password, once every slot is served and every replica synced.
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
        // A node that accepts connections may not answer yet (seen once on a busy machine,
        // with nothing on stdout): a failed create is tried again, and what it said is shown.
        let create = || {
            Command::new("redis-cli")
                .args(&cluster.cli)
                .args(["--cluster", "create"])
                .args(&nodes)
                .args(["--cluster-replicas", "1", "--cluster-yes"])
                .output()
                .expect("redis-cli must be installed (scripts/test.sh installs it)")
        };
        let mut output = create();
        for _ in 0..3 {
            if output.status.success() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
            output = create();
        }
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
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
