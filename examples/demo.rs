//! A local five-node ensemble, workers contending for one lock, and what happens as nodes
//! die: `cargo run --example demo` (needs `redis-server` on PATH).

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quorum_lock::{Error, Redlock};

/// One throw-away `redis-server` on loopback, killed when dropped.
struct Node {
    port: u16,
    child: Option<Child>,
    dir: std::path::PathBuf,
}

impl Node {
    fn start(port: u16) -> std::io::Result<Node> {
        let dir =
            std::env::temp_dir().join(format!("quorum-lock-demo-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let node = Node {
            port,
            child: Some(child),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "redis-server on {port} did not start"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(node)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Five free ports below the ephemeral range.
fn free_ports() -> Vec<u16> {
    let base = 20000 + (std::process::id() % 1000) as u16 * 10;
    (base..base + 200)
        .filter(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .take(5)
        .collect()
}

async fn round(redlock: &Redlock, label: &str, workers: usize, per_worker: usize) {
    println!("\n== {label}: {workers} workers x {per_worker} critical sections");
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let redlock = redlock.clone();
        let counter = Arc::clone(&counter);
        tasks.push(tokio::spawn(async move {
            for _ in 0..per_worker {
                match redlock
                    .lock("demo:nightly-report", Duration::from_secs(2))
                    .wait(Duration::from_secs(5))
                    .await
                {
                    Ok(guard) => {
                        // Read-modify-write that only mutual exclusion keeps correct.
                        let seen = counter.load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        counter.store(seen + 1, Ordering::SeqCst);
                        println!(
                            "  worker {w} held the lock ({} of {} nodes, {:>4} ms validity left), count = {}",
                            guard.report().count(&quorum_lock::NodeOutcome::Acquired),
                            guard.report().results().len(),
                            guard.validity().as_millis(),
                            seen + 1
                        );
                        if let Err(e) = guard.release().await {
                            println!("  worker {w}: release: {e}");
                        }
                    }
                    Err(e) => {
                        println!("  worker {w} could not lock: {e}");
                        if let Some(report) = e.report() {
                            println!("    nodes: {report}");
                        }
                        return;
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    println!(
        "  -> {} critical sections in {:.2?}, none overlapped",
        counter.load(Ordering::SeqCst),
        started.elapsed()
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ports = free_ports();
    if ports.len() < 5 {
        return Err("no five free loopback ports below 20200".into());
    }
    let mut nodes = Vec::new();
    for port in ports {
        nodes.push(Node::start(port).map_err(|e| {
            format!("{e}: is redis-server installed? (sudo apt-get install -y redis-server)")
        })?);
    }
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    println!("five independent Redis masters: {}", urls.join(" "));

    // The longest TTL in use (2 s) also sets the restart quarantine: nodes that started
    // less than that ago do not vote yet, as they may have lost locks they granted.
    let redlock = Redlock::builder()
        .nodes(&urls)
        .default_ttl(Duration::from_secs(2))
        .build()?;
    println!("quorum: {} of {}", redlock.quorum(), urls.len());
    println!("the nodes just started: their votes count once they have run for one TTL (2 s)");

    round(&redlock, "all five nodes up", 4, 3).await;

    nodes[1].kill();
    nodes[3].kill();
    println!("\nkilled nodes 2 and 4 (a minority)");
    round(&redlock, "three of five nodes up", 4, 3).await;

    nodes[4].kill();
    println!("\nkilled node 5 too: only two of five remain, no majority");
    match redlock
        .lock("demo:nightly-report", Duration::from_secs(2))
        .wait(Duration::from_secs(1))
        .await
    {
        Ok(_) => println!("  unexpected: acquired without a majority"),
        Err(e @ Error::Timeout { .. }) => {
            println!("  lock refused, as it must be: {e}");
            if let Some(report) = e.report() {
                println!("    nodes: {report}");
            }
            println!("    unavailable: {}", e.is_unavailable());
        }
        Err(e) => println!("  lock refused: {e}"),
    }
    println!("\ndone; stopping the nodes");
    Ok(())
}
