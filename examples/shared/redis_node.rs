//! Throw-away `redis-server` nodes on loopback and the temporary directory they run in,
//! shared by the demo and the fenced-SQLite example. Not a crate: each example includes
//! this file with `#[path]`, so it builds on its own with only the dependencies it lists
//! (the standard library and `quorum_lock`'s re-exported `redis`).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use quorum_lock::redis;

/// Ports handed to nodes: below the ephemeral range, like the library's own tests.
const PORTS: std::ops::Range<u16> = 20000..32000;
/// Ports tried per node before giving up (another process may take one first).
const TRIES: usize = 20;

/// A directory under the system's temporary directory, removed with its content on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates a new, empty directory named after `label`, this process and a counter.
    ///
    /// # Errors
    ///
    /// When the directory cannot be created.
    pub fn new(label: &str) -> Result<TempDir, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(TempDir(path))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One `redis-server` without persistence, SIGKILLed and reaped when killed or dropped.
#[derive(Debug)]
pub struct Node {
    port: u16,
    child: Option<Child>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Node {
    /// Starts a node with its data in `dir` on a free port of [`PORTS`], retrying on another
    /// port when the chosen one is taken before the server binds it, and waits until it
    /// answers. `install_hint` follows the error when `redis-server` cannot be run.
    ///
    /// # Errors
    ///
    /// When no node could be started, with the last reason.
    pub fn start(dir: &Path, install_hint: &str) -> Result<Node, String> {
        let mut last = String::from("no free port");
        for _ in 0..TRIES {
            let port = random_port();
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
                continue;
            }
            match Node::start_on(port, dir, install_hint) {
                Ok(node) => return Ok(node),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Starts a node on `port` with its data in `dir` and waits until it answers: how a
    /// node killed with [`kill`](Self::kill) comes back on its address, empty (without
    /// persistence it reads nothing back), as a server that lost its memory in a crash.
    ///
    /// # Errors
    ///
    /// When the server cannot be run, exits at start (the port is taken, say), or does not
    /// answer within 10 s.
    pub fn start_on(port: u16, dir: &Path, install_hint: &str) -> Result<Node, String> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            // No persistence (no RDB snapshot, no AOF): a node started again on its port
            // comes back with no keys at all.
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A group of its own: Ctrl-C in a terminal reaches the example only, which then
            // stops its nodes itself, in order.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start redis-server ({e}): {install_hint}"))?;
        // From here on, an early return kills the process.
        let mut node = Node {
            port,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let child = node.child.as_mut().expect("not killed yet");
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "redis-server on port {port} exited at start ({status})"
                ));
            }
            let pid = child.id();
            // Ours only if the server on the port reports our child's pid.
            if node.pid_on_port() == Some(pid) {
                return Ok(node);
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server on port {port} not ready within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The node's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// Kills the process (SIGKILL, as a crash would) and reaps it; idempotent.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The `process_id` of the server answering on this node's port, if one answers.
    fn pid_on_port(&self) -> Option<u32> {
        let client = redis::Client::open(self.url()).ok()?;
        let mut conn = client
            .get_connection_with_timeout(Duration::from_millis(200))
            .ok()?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
    }
}

fn random_port() -> u16 {
    let random = RandomState::new().hash_one(Instant::now());
    PORTS.start + (random % u64::from(PORTS.end - PORTS.start)) as u16
}
