//! [`ServerProcess`]: a server a test owns on a free loopback port, which it may stop
//! (SIGKILL), pause (SIGSTOP), resume and start again; killed when dropped. The Redis and
//! memcached servers of the kit are one each.

use std::process::{Child, Command, Stdio};

use crate::ports::{free_port, wait_for_port};

/// A server process on `127.0.0.1:port`, started by `program` with the arguments `args`
/// gives for the port.
#[derive(Debug)]
pub struct ServerProcess {
    /// The loopback port it listens on, kept across restarts.
    pub port: u16,
    program: &'static str,
    args: fn(u16) -> Vec<String>,
    child: Option<Child>,
}

impl ServerProcess {
    /// A free port with no server yet, for starting one with [`launch`](Self::launch).
    pub fn not_started(program: &'static str, args: fn(u16) -> Vec<String>) -> Self {
        Self {
            port: free_port(),
            program,
            args,
            child: None,
        }
    }

    /// Starts the server on its port (again, after `stop`) and waits until it accepts
    /// connections.
    pub fn launch(&mut self) {
        let child = Command::new(self.program)
            .args((self.args)(self.port))
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{} must be installed (scripts/test.sh installs it): {e}",
                    self.program
                )
            });
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

    /// Kills it and starts it again on the same port, with nothing of what it held.
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

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.resume();
        self.stop();
    }
}
