//! The contenders: floors built on raw `redis` connections, quorum-lock, rslock and redlock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, IntoConnectionInfo, Value};

use crate::support::stats::ms;
use crate::{
    BUSY, FLOOR_1RTT, FLOOR_2ROUNDS, FLOOR_BUSY, NODE_TIMEOUT, QUORUM, QUORUM_NAGLE, QUORUM_QUIET,
    QUORUM_READ, QUORUM_WRITE, REDLOCK, RSLOCK, TTL,
};

/// One node as the floors see it: a multiplexed connection, or a node that never answers.
#[derive(Clone)]
pub enum FloorNode {
    Conn(MultiplexedConnection),
    /// Modelled as a request that times out after [`NODE_TIMEOUT`].
    Silent,
}

/// A floor connection: the driver's own TCP settings, Nagle's algorithm on (as rslock's
/// connections). With 16 tasks sharing one connection, Nagle lets the kernel coalesce the
/// small commands written while earlier ones are unacknowledged: fewer segments and fewer
/// reads on both sides (scenario 2, N = 1: client CPU per cycle ~11.5 µs against ~15 µs
/// with `TCP_NODELAY`, and rslock beat a `TCP_NODELAY` floor by 1.03-1.12x). A lone request
/// (scenario 1) has nothing unacknowledged before it and leaves at once either way.
pub async fn floor_conn(url: &str) -> FloorNode {
    let info = url.into_connection_info().expect("node URL");
    let client = redis::Client::open(info).expect("redis client");
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(None);
    let conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("floor connection");
    FloorNode::Conn(conn)
}

/// Loads the compare-and-delete script, so that releases are one `EVALSHA`.
pub async fn load_script(node: &FloorNode) {
    if let FloorNode::Conn(conn) = node {
        let _: String = SCRIPT
            .prepare_invoke()
            .load_async(&mut conn.clone())
            .await
            .expect("SCRIPT LOAD");
    }
}

pub async fn floor_nodes(urls: &[String]) -> Arc<Vec<FloorNode>> {
    let mut nodes = Vec::with_capacity(urls.len());
    for url in urls {
        nodes.push(floor_conn(url).await);
    }
    for node in &nodes {
        load_script(node).await;
    }
    Arc::new(nodes)
}

/// The compare-and-delete of every Redlock release: deletes `KEYS[1]` only while it still
/// holds `ARGV[1]`; returns 1 if it deleted, 0 otherwise.
const COMPARE_AND_DELETE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";

static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(COMPARE_AND_DELETE));

/// Whether an answer is a yes: `OK` from `SET NX`, 1 from the compare-and-delete.
fn is_yes(reply: &redis::RedisResult<Value>) -> bool {
    matches!(reply, Ok(Value::Okay | Value::Int(1)))
}

/// One request to one node, awaited in place.
async fn ask(node: &FloorNode, cmd: &redis::Cmd) -> bool {
    match node {
        FloorNode::Conn(conn) => is_yes(&cmd.query_async(&mut conn.clone()).await),
        FloorNode::Silent => {
            tokio::time::sleep(NODE_TIMEOUT).await;
            false
        }
    }
}

/// Sends `cmd` to every node at once and returns when `need` of them answered, with how
/// many of those answers were a yes. Everything is awaited in place, in the calling task:
/// one node is one plain request, all nodes one `join_all`. Requests still in flight at
/// `need` answers go on in one spawned task: the driver does not write a request whose
/// caller has gone, so dropping them would leave keys behind (a majority floor that then
/// refused most of its later acquisitions, runs G and H, scenario 3).
pub async fn round(nodes: &[FloorNode], need: usize, cmd: &redis::Cmd) -> usize {
    if let [node] = nodes {
        return usize::from(ask(node, cmd).await);
    }
    if need >= nodes.len() {
        let answers = join_all(nodes.iter().map(|node| ask(node, cmd))).await;
        return answers.into_iter().filter(|&yes| yes).count();
    }
    let cmd = Arc::new(cmd.clone());
    let mut pending: FuturesUnordered<_> = (nodes.iter())
        .map(|node| {
            let (node, cmd) = (node.clone(), Arc::clone(&cmd));
            async move { ask(&node, &cmd).await }
        })
        .collect();
    let (mut answered, mut yes) = (0, 0);
    while let Some(y) = pending.next().await {
        answered += 1;
        yes += usize::from(y);
        if answered >= need {
            break;
        }
    }
    if !pending.is_empty() {
        tokio::spawn(async move { while pending.next().await.is_some() {} });
    }
    yes
}

/// `SET key token NX PX ttl`.
pub fn set_nx_px(key: &str, token: &str, ttl_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
    cmd
}

/// `EVALSHA <compare-and-delete> 1 key token` (the script is loaded by [`floor_nodes`]).
pub fn compare_and_delete(key: &str, token: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(SCRIPT.get_hash()).arg(1).arg(key).arg(token);
    cmd
}

/// A token no other acquisition of this process uses.
fn token() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "floor-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Something that locks asynchronously.
#[derive(Clone)]
pub enum Contender {
    /// One `SET NX PX` (fresh key, 1 s TTL) to the first node: a timing reference, not a lock.
    OneTrip(Arc<Vec<FloorNode>>),
    /// The least work of a Redlock lock + unlock: `SET key token NX PX` to all nodes, then
    /// the compare-and-delete (`EVALSHA`) to all; each round done at `need` answers, and
    /// the lock held with a majority of yeses. Refused (an error) rather than waiting.
    TwoRounds {
        nodes: Arc<Vec<FloorNode>>,
        need: usize,
    },
    /// A control, not a floor: [`Contender::TwoRounds`] (all answers) with [`BUSY`] of
    /// busy work (a spin on the clock) before each acquisition. Scenario 2 runs client
    /// and servers on the same two cores, where its throughput is not monotone in the
    /// client's work: a worker that finds nothing to run parks its thread, and waking it
    /// again costs more than a little work that keeps it running (BENCHMARKS.md,
    /// "Scenario 2's floor can be beaten by doing more work": the floor with 1 µs of spin
    /// did a median 1.19x the floor's rate, 12 runs each). When rslock beats the floor
    /// there, this row shows whether it is that effect.
    Busy(Arc<Vec<FloorNode>>),
    /// [`Contender::TwoRounds`] (all answers) serialised by an in-process FIFO mutex: the
    /// ideal hand-off of a contended lock with the minimum Redis traffic.
    Fifo {
        nodes: Arc<Vec<FloorNode>>,
        queue: Arc<tokio::sync::Mutex<()>>,
    },
    Quorum(quorum_lock::Redlock),
    /// quorum-lock's read-write lock of the resource: its read lock, or its write lock.
    QuorumRw(quorum_lock::Redlock, Side),
    /// quorum-lock, extending the lock once (to the same TTL) between lock and release.
    QuorumExtend(quorum_lock::Redlock),
    Rslock(rslock::LockManager),
}

/// A side of a read-write lock.
#[derive(Clone, Copy)]
pub enum Side {
    Read,
    Write,
}

pub enum Held {
    Nothing,
    /// A floor's key and token.
    Key(String, String),
    Fifo(tokio::sync::OwnedMutexGuard<()>, String, String),
    Quorum(quorum_lock::LockGuard),
    Rslock(rslock::Lock),
}

/// One floor acquisition: the key and token when a majority said yes.
async fn floor_acquire(
    nodes: &[FloorNode],
    need: usize,
    res: &str,
    ttl: Duration,
) -> Result<Held, String> {
    let token = token();
    let yes = round(nodes, need, &set_nx_px(res, &token, ms(ttl))).await;
    if yes > nodes.len() / 2 {
        Ok(Held::Key(res.to_string(), token))
    } else {
        // Undo a minority of yeses, as a lock would.
        round(nodes, nodes.len(), &compare_and_delete(res, &token)).await;
        Err(format!("floor: refused ({yes} of {} nodes)", nodes.len()))
    }
}

impl Contender {
    /// Acquires `res` for [`TTL`], waiting (with the implementation's own retries) while it
    /// is taken; the floors are refused instead.
    pub async fn acquire(&self, res: &str) -> Result<Held, String> {
        self.acquire_for(res, TTL).await
    }

    /// [`Contender::acquire`] with a lock TTL of `ttl`.
    pub async fn acquire_for(&self, res: &str, ttl: Duration) -> Result<Held, String> {
        match self {
            Contender::OneTrip(nodes) => {
                static SEQ: AtomicU64 = AtomicU64::new(0);
                let key = format!("{res}:{}", SEQ.fetch_add(1, Ordering::Relaxed));
                round(&nodes[..1], 1, &set_nx_px(&key, "1", 1000)).await;
                Ok(Held::Nothing)
            }
            Contender::TwoRounds { nodes, need } => floor_acquire(nodes, *need, res, ttl).await,
            Contender::Busy(nodes) => {
                let start = std::time::Instant::now();
                while start.elapsed() < BUSY {
                    std::hint::spin_loop();
                }
                floor_acquire(nodes, nodes.len(), res, ttl).await
            }
            Contender::Fifo { nodes, queue } => {
                let turn = Arc::clone(queue).lock_owned().await;
                match floor_acquire(nodes, nodes.len(), res, ttl).await? {
                    Held::Key(key, token) => Ok(Held::Fifo(turn, key, token)),
                    _ => unreachable!("floor_acquire returns a key"),
                }
            }
            Contender::Quorum(rl) => rl
                .lock(res, ttl)
                .await
                .map(Held::Quorum)
                .map_err(|e| format!("lock: {e}")),
            Contender::QuorumRw(rl, side) => {
                let rwlock = rl.rwlock(res).map_err(|e| format!("rwlock: {e}"))?;
                let held = match side {
                    Side::Read => rwlock.read(ttl).await.map(|g| g.into_guard()),
                    Side::Write => rwlock.write(ttl).await,
                };
                held.map(Held::Quorum).map_err(|e| format!("lock: {e}"))
            }
            Contender::QuorumExtend(rl) => {
                let guard = rl.lock(res, TTL).await.map_err(|e| format!("lock: {e}"))?;
                guard
                    .extend(TTL)
                    .await
                    .map_err(|e| format!("extend: {e}"))?;
                Ok(Held::Quorum(guard))
            }
            // rslock's own "wait until acquired" loop (`lock` with its 3 tries, repeated).
            Contender::Rslock(lm) => lm
                .acquire_no_guard(res.as_bytes(), ttl)
                .await
                .map(Held::Rslock)
                .map_err(|e| format!("lock: {e}")),
        }
    }

    pub async fn release(&self, held: Held) -> Result<(), String> {
        match (self, held) {
            (_, Held::Nothing) => Ok(()),
            (Contender::TwoRounds { nodes, need }, Held::Key(key, token)) => {
                round(nodes, *need, &compare_and_delete(&key, &token)).await;
                Ok(())
            }
            (Contender::Busy(nodes), Held::Key(key, token)) => {
                round(nodes, nodes.len(), &compare_and_delete(&key, &token)).await;
                Ok(())
            }
            (Contender::Fifo { nodes, .. }, Held::Fifo(turn, key, token)) => {
                round(nodes, nodes.len(), &compare_and_delete(&key, &token)).await;
                drop(turn);
                Ok(())
            }
            (_, Held::Quorum(guard)) => guard
                .release()
                .await
                .map(drop)
                .map_err(|e| format!("release: {e}")),
            (Contender::Rslock(lm), Held::Rslock(lock)) => {
                lm.unlock(&lock).await;
                Ok(())
            }
            _ => Err("lock released through the wrong contender".into()),
        }
    }

    pub async fn cycle(&self, res: &str) -> Result<(), String> {
        let held = self.acquire(res).await?;
        self.release(held).await
    }
}

/// A contender of the latency and throughput scenarios: async, or the sync redlock crate
/// (run on blocking threads).
#[derive(Clone)]
pub enum Subject {
    Async(Contender),
    Sync(Arc<redlock::RedLock>),
}

/// The contenders of the uncontended scenarios (1, 2 and 6), in table order.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// [`Contender::OneTrip`], named [`FLOOR_1RTT`].
    OneTrip,
    /// [`Contender::TwoRounds`] waiting for every node, named [`FLOOR_2ROUNDS`].
    TwoRounds,
    /// [`Contender::Busy`], named [`FLOOR_BUSY`].
    Busy,
    /// quorum-lock with its defaults ([`quorum`] with [`defaults`]), named [`QUORUM`].
    Quorum,
    /// quorum-lock with Nagle's algorithm on its connections (`tcp_nodelay(false)`; the
    /// `redis` driver's default, which rslock keeps), named [`QUORUM_NAGLE`].
    QuorumNagle,
    /// quorum-lock with release notifications off (`notifications(false)`: a release is a
    /// plain compare-and-delete on every node), named [`QUORUM_QUIET`].
    QuorumQuiet,
    /// quorum-lock's read lock, named [`QUORUM_READ`].
    QuorumRead,
    /// quorum-lock's write lock, named [`QUORUM_WRITE`].
    QuorumWrite,
    /// An rslock `LockManager`, named [`RSLOCK`].
    Rslock,
    /// The sync redlock crate, named [`REDLOCK`].
    Redlock,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::OneTrip => FLOOR_1RTT,
            Kind::TwoRounds => FLOOR_2ROUNDS,
            Kind::Busy => FLOOR_BUSY,
            Kind::Quorum => QUORUM,
            Kind::QuorumNagle => QUORUM_NAGLE,
            Kind::QuorumQuiet => QUORUM_QUIET,
            Kind::QuorumRead => QUORUM_READ,
            Kind::QuorumWrite => QUORUM_WRITE,
            Kind::Rslock => RSLOCK,
            Kind::Redlock => REDLOCK,
        }
    }
}

/// `kinds` less those whose name contains none of the comma-separated parts of `$ONLY`
/// when it is set (`ONLY=floor,rslock`).
pub fn selected(kinds: &[Kind]) -> Vec<Kind> {
    let only = std::env::var("ONLY").ok().filter(|o| !o.is_empty());
    let wanted = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|part| name.contains(part)))
    };
    kinds.iter().copied().filter(|k| wanted(k.name())).collect()
}

/// One named, connected contender per kind in `kinds` (in that order) on the nodes `urls`,
/// less those whose name does not contain `$ONLY` when it is set (e.g. `ONLY=quorum-lock`
/// to profile one client alone).
pub async fn lock_contenders(urls: &[String], kinds: &[Kind]) -> Vec<(&'static str, Subject)> {
    let kinds = selected(kinds);
    let floors = kinds
        .iter()
        .any(|k| matches!(k, Kind::OneTrip | Kind::TwoRounds | Kind::Busy));
    let nodes = if floors {
        floor_nodes(urls).await
    } else {
        Arc::new(Vec::new())
    };
    let mut out = Vec::with_capacity(kinds.len());
    for kind in kinds {
        let subject = match kind {
            Kind::OneTrip => Subject::Async(Contender::OneTrip(Arc::clone(&nodes))),
            Kind::TwoRounds => Subject::Async(Contender::TwoRounds {
                need: nodes.len(),
                nodes: Arc::clone(&nodes),
            }),
            Kind::Busy => Subject::Async(Contender::Busy(Arc::clone(&nodes))),
            Kind::Quorum => Subject::Async(Contender::Quorum(quorum(urls, defaults).await)),
            Kind::QuorumNagle => Subject::Async(Contender::Quorum(quorum(urls, nagle).await)),
            Kind::QuorumQuiet => {
                Subject::Async(Contender::Quorum(quorum(urls, polling_only).await))
            }
            Kind::QuorumRead => Subject::Async(Contender::QuorumRw(
                quorum(urls, defaults).await,
                Side::Read,
            )),
            Kind::QuorumWrite => Subject::Async(Contender::QuorumRw(
                quorum(urls, defaults).await,
                Side::Write,
            )),
            Kind::Rslock => {
                Subject::Async(Contender::Rslock(rslock::LockManager::new(urls.to_vec())))
            }
            Kind::Redlock => Subject::Sync(Arc::new(redlock::RedLock::new(urls.to_vec()))),
        };
        out.push((kind.name(), subject));
    }
    out
}

pub type Tune = fn(quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder;

pub fn defaults(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b
}

/// Nagle's algorithm on the node connections (see `RedlockBuilder::tcp_nodelay`).
pub fn nagle(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b.tcp_nodelay(false)
}

/// Release notifications off: waiters only poll.
pub fn polling_only(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b.notifications(false)
}

/// Restart quarantine on: a member under Sentinel, or one that is a Redis Cluster, is
/// refused without it.
pub fn quarantined(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b.restart_quarantine(true)
}

/// Restart quarantine on and release notifications off.
pub fn quarantined_quiet(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b.restart_quarantine(true).notifications(false)
}

/// A connected quorum-lock client with its defaults, except: `node_timeout` set explicitly
/// (to its default), and no restart quarantine, which would ignore the votes of servers
/// started less than the longest TTL ago, i.e. every server of this bench.
pub async fn quorum(urls: &[String], tune: Tune) -> quorum_lock::Redlock {
    let rl = tune(
        quorum_lock::Redlock::builder()
            .nodes(urls)
            .node_timeout(NODE_TIMEOUT)
            .restart_quarantine(false),
    )
    .build()
    .expect("build quorum-lock client");
    rl.connect().await.expect("quorum-lock connect");
    rl
}

pub fn redlock_cycle(rl: &redlock::RedLock, res: &[u8]) -> Result<(), String> {
    match rl.lock(res, usize::try_from(ms(TTL)).unwrap_or(usize::MAX)) {
        Ok(Some(lock)) => {
            rl.unlock(&lock);
            Ok(())
        }
        Ok(None) => Err("redlock: not acquired after its retries".into()),
        Err(e) => Err(format!("redlock: {e}")),
    }
}
