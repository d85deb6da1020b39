//! [`RedisSentinel`]: a master, its replica and a sentinel watching them.

use std::time::{Duration, Instant};

use crate::ports::free_port;
use crate::redis::redis_cli;
use crate::spawned::Spawned;
use crate::unique::temp_dir;

/// A master, its replica and one sentinel (quorum 1, `down-after-milliseconds 1000`)
/// watching it as `tollgate`, on loopback; stopped when dropped.
#[derive(Debug)]
pub struct RedisSentinel {
    /// The master's port, until the sentinel promotes the replica.
    pub master_port: u16,
    /// The replica's port: the master after a failover.
    pub replica_port: u16,
    /// The sentinel's port.
    pub sentinel_port: u16,
    master: Option<Spawned>,
    _replica: Spawned,
    _sentinel: Spawned,
}

impl RedisSentinel {
    /// The name the sentinel watches the master by.
    pub const MASTER_NAME: &'static str = "tollgate";

    /// The three servers, once the replica has synced and the sentinel has found it.
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

    /// The sentinel's `redis://` URL.
    pub fn sentinel_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.sentinel_port)
    }

    /// SIGKILL to the master.
    pub fn kill_master(&mut self) {
        self.master = None;
    }
}
