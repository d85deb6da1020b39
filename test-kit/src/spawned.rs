//! [`Spawned`]: a server process in a directory of its own, both gone when dropped.

use std::process::{Child, Command, Stdio};

use crate::ports::wait_for_port;

/// A process stopped (SIGKILL) when dropped, with a directory removed then.
#[derive(Debug)]
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
