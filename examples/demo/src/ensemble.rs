//! Five throw-away `redis-server` processes on loopback and the directory they run in.
//! Everything is removed when the [`Ensemble`] is dropped, which also happens when the
//! future that owns it is cancelled (by a signal in `main`).

#[path = "../../shared/redis_node.rs"]
mod redis_node;

use std::path::Path;

use quorum_lock::redis;
use redis_node::{Node, TempDir};

/// The nodes and their common data directory.
#[derive(Debug)]
pub struct Ensemble {
    nodes: Vec<Node>,
    // Declared after `nodes`: the processes are stopped before their directory goes (a
    // server whose directory is gone may still try to write there).
    dir: TempDir,
}

impl Ensemble {
    /// Starts `n` nodes on free loopback ports below the ephemeral range, in a new
    /// directory under the system's temporary directory.
    pub async fn start(n: usize) -> Result<Ensemble, String> {
        let mut ensemble = Ensemble {
            nodes: Vec::new(),
            dir: TempDir::new("quorum-lock-demo")?,
        };
        for _ in 0..n {
            // A node takes a moment to answer: waited for off the runtime's workers.
            let dir = ensemble.dir.path().to_owned();
            let node =
                tokio::task::spawn_blocking(move || Node::start(&dir, "run scripts/demo.sh"))
                    .await
                    .map_err(|e| format!("starting a node failed: {e}"))??;
            ensemble.nodes.push(node);
        }
        Ok(ensemble)
    }

    /// `redis://127.0.0.1:PORT` for every node, in order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// The ports, in order (node 1 first).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(Node::port).collect()
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills node `number` (counted from 1).
    pub fn kill(&mut self, number: usize) {
        self.nodes[number - 1].kill();
    }

    /// Kills node `number` (counted from 1) and starts a new server on its port, without
    /// persistence: the node comes back with no keys, as after a crash that lost its memory.
    pub async fn restart(&mut self, number: usize) -> Result<(), String> {
        let node = &mut self.nodes[number - 1];
        node.kill();
        let (port, dir) = (node.port(), self.dir.path().to_owned());
        let fresh =
            tokio::task::spawn_blocking(move || Node::start_on(port, &dir, "it ran before"))
                .await
                .map_err(|e| format!("restarting node {number} failed: {e}"))??;
        self.nodes[number - 1] = fresh;
        Ok(())
    }

    /// How many keys node `number` (counted from 1) holds (`DBSIZE`).
    pub async fn key_count(&self, number: usize) -> Result<u64, String> {
        let failed = |e: redis::RedisError| format!("counting node {number}'s keys: {e}");
        let client = redis::Client::open(self.nodes[number - 1].url()).map_err(failed)?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(failed)?;
        redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .map_err(failed)
    }
}
