//! Real memcached servers for the tests: the one shared by a test binary, and ones a test
//! owns, to stop, pause and restart.

use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use super::{free_port, wait_for_port};

/// The URL of the memcached shared by this test binary: `TOLLGATE_MEMCACHED_URL` (set by
/// scripts/test.sh), else a private memcached started once and stopped when the test process
/// exits. Tests isolate themselves with a unique key prefix. (`-u nobody`: as root, memcached
/// wants a user to run as; otherwise it ignores it.)
pub fn shared_memcached_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("TOLLGATE_MEMCACHED_URL") {
            return url;
        }
        let port = free_port();
        // The shell ends memcached when our stdin closes, i.e. when this process exits.
        let script =
            format!("memcached -p {port} -U 0 -l 127.0.0.1 -u nobody >/dev/null & pid=$!; read _; kill $pid");
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .spawn()
            .expect("memcached must be installed (scripts/test.sh installs it)");
        std::mem::forget(child);
        wait_for_port(port);
        format!("memcache://127.0.0.1:{port}")
    })
    .clone()
}

/// A memcached this test owns: it may stop, pause, resume and restart it.
pub struct MemcachedServer {
    pub port: u16,
    child: Option<Child>,
}

impl MemcachedServer {
    pub fn start() -> Self {
        let mut server = Self {
            port: free_port(),
            child: None,
        };
        server.launch();
        server
    }

    /// `memcache://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("memcache://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts memcached on this port (again, after `stop`).
    pub fn launch(&mut self) {
        let child = Command::new("memcached")
            .args(["-p", &self.port.to_string(), "-U", "0", "-l", "127.0.0.1"])
            // As root, memcached wants a user to run as; otherwise it ignores this.
            .args(["-u", "nobody"])
            .stdout(Stdio::null())
            .spawn()
            .expect("memcached must be installed (scripts/test.sh installs it)");
        self.child = Some(child);
        wait_for_port(self.port);
    }

    /// Kills it (SIGKILL): every connection drops, and what it held is gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
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

impl Drop for MemcachedServer {
    fn drop(&mut self) {
        self.resume();
        self.stop();
    }
}
