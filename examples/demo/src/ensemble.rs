//! Five throw-away `redis-server` processes on loopback and the directory they run in.
//! Everything is removed when the [`Ensemble`] is dropped, which also happens when the
//! future that owns it is cancelled (by a signal in `main`).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

/// One `redis-server`, killed and reaped when dropped.
#[derive(Debug)]
pub struct Node {
    port: u16,
    child: Option<Child>,
}

impl Node {
    /// Starts `redis-server` on `port` with no persistence, data in `dir`, and waits until
    /// it accepts connections.
    async fn start(port: u16, dir: &Path) -> Result<Node, String> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A group of its own: Ctrl-C in a terminal reaches the demo only, which then
            // stops the nodes itself, in order.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start redis-server ({e}): run scripts/demo.sh"))?;
        // From here on, dropping `node` (an error, a cancelled future) kills the process.
        let mut node = Node {
            port,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(node);
            }
            let exited = node
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(format!(
                    "redis-server on port {port} exited at start ({status})"
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "redis-server on port {port} did not start within 10 s"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills the process (SIGKILL, as a crash would) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The nodes and their common data directory.
#[derive(Debug)]
pub struct Ensemble {
    nodes: Vec<Node>,
    dir: PathBuf,
}

impl Ensemble {
    /// Starts `n` nodes on free loopback ports below the ephemeral range, in a new
    /// directory under the system's temporary directory.
    pub async fn start(n: usize) -> Result<Ensemble, String> {
        let dir = std::env::temp_dir().join(format!("quorum-lock-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut ensemble = Ensemble {
            nodes: Vec::new(),
            dir,
        };
        let ports = free_ports(n);
        if ports.len() < n {
            return Err(format!(
                "fewer than {n} free loopback ports between 20000 and 30000"
            ));
        }
        for port in ports {
            let node = Node::start(port, &ensemble.dir).await?;
            ensemble.nodes.push(node);
        }
        Ok(ensemble)
    }

    /// `redis://127.0.0.1:PORT` for every node, in order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }

    /// The ports, in order (node 1 first).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills node `number` (counted from 1).
    pub fn kill(&mut self, number: usize) {
        self.nodes[number - 1].kill();
    }
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        // Processes first: a server whose directory is gone may still try to write there.
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` ports that are free now, below the ephemeral range (32768 and up).
fn free_ports(n: usize) -> Vec<u16> {
    let base = 20000 + (std::process::id() % 900) as u16 * 10;
    (base..30000)
        .chain(20000..base)
        .filter(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .take(n)
        .collect()
}
