//! Throw-away `redis-server` lock nodes on loopback, and a temporary directory for them and
//! the SQLite file. Everything is killed and removed on drop, also when a test panics.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
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

/// One `redis-server` without persistence, SIGKILLed and reaped on drop.
#[derive(Debug)]
struct Node {
    port: u16,
    child: Child,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    /// Starts a node on a free port of [`PORTS`], retrying on another port when the chosen
    /// one is taken before the server binds it.
    fn start(dir: &Path) -> Result<Node, String> {
        let mut last = String::from("no free port");
        for _ in 0..TRIES {
            let port = random_port();
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
                continue;
            }
            match Node::start_on(port, dir) {
                Ok(node) => return Ok(node),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_on(port: u16, dir: &Path) -> Result<Node, String> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start redis-server ({e}): is it installed?"))?;
        // From here on, an early return kills the process.
        let mut node = Node { port, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = node.child.try_wait() {
                return Err(format!(
                    "redis-server on port {port} exited at start ({status})"
                ));
            }
            // Ours only if the server on the port reports our child's pid.
            if node.pid_on_port() == Some(node.child.id()) {
                return Ok(node);
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server on port {port} not ready within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The `process_id` of the server answering on this node's port, if one answers.
    fn pid_on_port(&self) -> Option<u32> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port)).ok()?;
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

/// `n` lock nodes and the directory they (and the example's SQLite file) live in.
#[derive(Debug)]
pub struct Nodes {
    nodes: Vec<Node>,
    // Declared after `nodes`: the processes are stopped before their directory goes.
    dir: TempDir,
}

impl Nodes {
    /// Starts `n` nodes in a new temporary directory and waits until each answers.
    ///
    /// # Errors
    ///
    /// When the directory cannot be created or a node does not start.
    pub fn start(n: usize) -> Result<Nodes, String> {
        let dir = TempDir::new("quorum-lock-fenced-sqlite")?;
        let nodes = (0..n)
            .map(|_| Node::start(dir.path()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Nodes { nodes, dir })
    }

    /// `redis://127.0.0.1:PORT` for every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }

    /// The temporary directory, removed when the nodes are dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
