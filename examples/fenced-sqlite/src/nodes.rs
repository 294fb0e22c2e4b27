//! Throw-away `redis-server` lock nodes on loopback, and a temporary directory for them and
//! the SQLite file. Everything is killed and removed on drop, also when a test panics.

#[path = "../../shared/redis_node.rs"]
mod redis_node;

use std::path::Path;

use redis_node::Node;
pub use redis_node::TempDir;

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
            .map(|_| Node::start(dir.path(), "is it installed?"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Nodes { nodes, dir })
    }

    /// `redis://127.0.0.1:PORT` for every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// The temporary directory, removed when the nodes are dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
