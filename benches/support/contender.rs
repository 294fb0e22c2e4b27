//! The contenders: floors built on raw `redis` connections, quorum-lock, rslock and redlock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::io::tcp::TcpSettings;
use redis::{AsyncConnectionConfig, IntoConnectionInfo};

use crate::support::stats::ms;
use crate::{NODE_TIMEOUT, TTL};

/// One node as the floors see it: a multiplexed connection, or a node that never answers.
#[derive(Clone)]
pub enum FloorNode {
    Conn(MultiplexedConnection),
    /// Modelled as a request that times out after [`NODE_TIMEOUT`].
    Silent,
}

pub async fn floor_conn(url: &str) -> FloorNode {
    let info = url
        .into_connection_info()
        .expect("node URL")
        .set_tcp_settings(TcpSettings::default().set_nodelay(true));
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

pub async fn floor_nodes(urls: &[String]) -> Arc<Vec<FloorNode>> {
    let mut nodes = Vec::with_capacity(urls.len());
    for url in urls {
        nodes.push(floor_conn(url).await);
    }
    Arc::new(nodes)
}

/// Sends `cmd` to every node at once and returns when `need` of them answered; the rest
/// are dropped (a command already written is still executed by its server).
pub async fn round(nodes: &[FloorNode], need: usize, cmd: Arc<redis::Cmd>) {
    let mut pending: FuturesUnordered<_> = nodes
        .iter()
        .map(|node| {
            let node = node.clone();
            let cmd = Arc::clone(&cmd);
            async move {
                match node {
                    FloorNode::Conn(mut conn) => {
                        let _ = cmd.query_async::<redis::Value>(&mut conn).await;
                    }
                    FloorNode::Silent => tokio::time::sleep(NODE_TIMEOUT).await,
                }
            }
        })
        .collect();
    let mut answered = 0;
    while pending.next().await.is_some() {
        answered += 1;
        if answered >= need {
            break;
        }
    }
}

pub fn set_nx_px(key: &str, ttl_ms: u64) -> Arc<redis::Cmd> {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg("1").arg("NX").arg("PX").arg(ttl_ms);
    Arc::new(cmd)
}

pub fn del(key: &str) -> Arc<redis::Cmd> {
    let mut cmd = redis::cmd("DEL");
    cmd.arg(key);
    Arc::new(cmd)
}

/// Something that locks asynchronously.
#[derive(Clone)]
pub enum Contender {
    /// One `SET NX PX` (fresh key, 1 s TTL) to the first node.
    OneTrip(Arc<Vec<FloorNode>>),
    /// `SET NX PX` to all nodes, then `DEL` to all; each round done at `need` answers.
    TwoRounds {
        nodes: Arc<Vec<FloorNode>>,
        need: usize,
    },
    /// [`Contender::TwoRounds`] (all answers) serialised by an in-process FIFO mutex: the
    /// ideal hand-off of a contended lock with the minimum Redis traffic.
    Fifo {
        nodes: Arc<Vec<FloorNode>>,
        queue: Arc<tokio::sync::Mutex<()>>,
    },
    Quorum(quorum_lock::Redlock),
    Rslock(rslock::LockManager),
}

pub enum Held {
    Nothing,
    Key(String),
    Fifo(tokio::sync::OwnedMutexGuard<()>, String),
    Quorum(quorum_lock::LockGuard),
    Rslock(rslock::Lock),
}

impl Contender {
    /// Acquires `res`, waiting (with the implementation's own retries) while it is taken.
    pub async fn acquire(&self, res: &str) -> Result<Held, String> {
        match self {
            Contender::OneTrip(nodes) => {
                static SEQ: AtomicU64 = AtomicU64::new(0);
                let key = format!("{res}:{}", SEQ.fetch_add(1, Ordering::Relaxed));
                round(&nodes[..1], 1, set_nx_px(&key, 1000)).await;
                Ok(Held::Nothing)
            }
            Contender::TwoRounds { nodes, need } => {
                round(nodes, *need, set_nx_px(res, ms(TTL))).await;
                Ok(Held::Key(res.to_string()))
            }
            Contender::Fifo { nodes, queue } => {
                let turn = Arc::clone(queue).lock_owned().await;
                round(nodes, nodes.len(), set_nx_px(res, ms(TTL))).await;
                Ok(Held::Fifo(turn, res.to_string()))
            }
            Contender::Quorum(rl) => rl
                .lock(res, TTL)
                .await
                .map(Held::Quorum)
                .map_err(|e| format!("lock: {e}")),
            // rslock's own "wait until acquired" loop (`lock` with its 3 tries, repeated).
            Contender::Rslock(lm) => lm
                .acquire_no_guard(res.as_bytes(), TTL)
                .await
                .map(Held::Rslock)
                .map_err(|e| format!("lock: {e}")),
        }
    }

    pub async fn release(&self, held: Held) -> Result<(), String> {
        match (self, held) {
            (_, Held::Nothing) => Ok(()),
            (Contender::TwoRounds { nodes, need }, Held::Key(key)) => {
                round(nodes, *need, del(&key)).await;
                Ok(())
            }
            (Contender::Fifo { nodes, .. }, Held::Fifo(turn, key)) => {
                round(nodes, nodes.len(), del(&key)).await;
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

pub type Tune = fn(quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder;

pub fn defaults(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b
}

/// Release notifications off: waiters only poll.
pub fn polling_only(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b.notifications(false)
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
