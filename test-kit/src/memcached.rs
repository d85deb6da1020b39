//! Real memcached servers for the tests: the one shared by a test binary, and ones a test
//! owns, to stop, pause and restart.

use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::ports::{free_port, wait_for_port};
use crate::process::ServerProcess;

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

/// A memcached this test owns: it may stop, pause, resume and restart it (all of
/// [`ServerProcess`]'s, which it dereferences to).
#[derive(Debug)]
pub struct MemcachedServer(ServerProcess);

impl MemcachedServer {
    /// A memcached on a free port, accepting connections.
    pub fn start() -> Self {
        let mut server = Self(ServerProcess::not_started("memcached", |port| {
            let port = port.to_string();
            // As root, memcached wants a user to run as; otherwise it ignores this.
            let args = ["-p", &port, "-U", "0", "-l", "127.0.0.1", "-u", "nobody"];
            args.map(str::to_owned).to_vec()
        }));
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
}

impl std::ops::Deref for MemcachedServer {
    type Target = ServerProcess;

    fn deref(&self) -> &ServerProcess {
        &self.0
    }
}

impl std::ops::DerefMut for MemcachedServer {
    fn deref_mut(&mut self) -> &mut ServerProcess {
        &mut self.0
    }
}
