//! A leader-only worker fenced by its epoch: `cargo run --example leader_worker`.
//!
//! Starts three lock nodes and one data node (`redis-server` on loopback, in a temporary
//! directory removed at the end). Two workers campaign for the election `counter-writer`;
//! only the leader increments a counter on the data node, each write carrying the term's
//! epoch through `fencing::fenced_set`. The first leader stalls past its term (its
//! renewals stop, as in a long pause); the second is elected with a higher epoch and
//! writes; the first wakes up and its write is refused by the data node.

#[path = "shared/redis_node.rs"]
mod redis_node;

use std::time::Duration;

use quorum_lock::fencing::fenced_set;
use quorum_lock::{AutoExtend, Leader, Redlock, redis};
use redis_node::{Node, TempDir};

const ELECTION: &str = "counter-writer";
const KEY: &str = "counter";
const TERM: Duration = Duration::from_secs(2);
const HINT: &str = "install Redis first: sudo apt-get install redis-server";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = TempDir::new("leader-worker")?;
    let nodes: Vec<Node> = (0..3)
        .map(|_| Node::start(dir.path(), HINT))
        .collect::<Result<_, _>>()?;
    let data = Node::start(dir.path(), HINT)?;
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    // Fresh nodes: declared new, so that they vote at once.
    let client = || Redlock::builder().nodes(&urls).build();
    let (a, b) = (client()?, client()?);
    a.declare_new().await?;
    let mut store = redis::Client::open(data.url())?
        .get_multiplexed_async_connection()
        .await?;

    // A leads, and stops renewing its term after it was won: a worker that stalls.
    let a_term = (a.election(ELECTION)?)
        .campaign("worker-a", TERM)
        .auto_extend(AutoExtend::new().max_extensions(0))
        .await?;
    let a_epoch = a_term.epoch();
    let wrote = fenced_set(&mut store, ELECTION, a_epoch, KEY, "1").await?;
    println!(
        "worker-a leads with epoch {a_epoch}; its write: {}",
        shown(wrote)
    );

    // B waits its turn, and leads once A's term has ended.
    let b_term = b.election(ELECTION)?.campaign("worker-b", TERM).await?;
    let b_epoch = b_term.epoch();
    if let Leader::Elected(term) = b.election(ELECTION)?.leader().await? {
        println!(
            "a majority says {:?} leads, epoch {}",
            term.value, term.epoch
        );
    }
    let wrote = fenced_set(&mut store, ELECTION, b_epoch, KEY, "2").await?;
    println!(
        "worker-b leads with epoch {b_epoch}; its write: {}",
        shown(wrote)
    );

    // A wakes up and writes as if it still led: the data node refuses the older epoch.
    let wrote = fenced_set(&mut store, ELECTION, a_epoch, KEY, "stale").await?;
    println!(
        "worker-a, awake, writes with epoch {a_epoch}: {}",
        shown(wrote)
    );
    let value: String = redis::cmd("GET").arg(KEY).query_async(&mut store).await?;
    println!("the counter holds {value:?}");
    drop(a_term);
    b_term.resign().await?;
    Ok(())
}

fn shown(wrote: bool) -> &'static str {
    match wrote {
        true => "accepted",
        false => "refused (an older epoch)",
    }
}
