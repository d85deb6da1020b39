//! Loopback ports: free ones, for a single server or a cluster node, and waiting until a server
//! listens on one.

use std::net::TcpListener;
use std::time::{Duration, Instant};

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// Waits until something accepts connections on loopback `port` (at most 10 s).
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
