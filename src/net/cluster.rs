//! A member that is a whole Redis Cluster: its slot table, learnt from `CLUSTER SLOTS`,
//! and one [`Node`] per shard master it has named, each a plain server connection. A lock
//! goes to the master that owns its keys' slot (`Ensemble::seated`); the member does not
//! follow `MOVED` or `ASK` itself: a redirected request does not vote, and the table is
//! learnt again in the background, so the next attempt goes to the new owner.
//!
//! A failover puts a promoted replica in a master's place: a new node here, in a new life
//! (`net::server_facts`), quarantined as a restart is. The old master may still accept
//! writes until it learns of the promotion; it stops within the cluster's node timeout
//! (`cluster-node-timeout`, read from the shard, 15 s when it cannot be read), so a
//! promoted master's age counts from that much after this client learnt it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use redis::{Client, ConnectionAddr, ConnectionInfo, RedisResult, Value};
use tokio::time::Instant;

use crate::net::coalesce::Yield;
use crate::net::node::{Member, Node, ShardOf};
use crate::net::server_facts::FactsHook;
use crate::protocol::slots::SLOTS;

/// The `cluster-node-timeout` assumed when the shard does not say (Redis's default).
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(15);

/// How often the slot table is learnt again at most, however many requests are redirected.
const REFRESH_INTERVAL: Duration = Duration::from_millis(100);

/// The shard masters a member's slot table names, by address, and which owns each slot.
#[derive(Default)]
struct Table {
    /// Every shard master named so far, by `host:port` (never removed: a guard may still
    /// hold one).
    shards: HashMap<String, Arc<Node>>,
    /// The owner of each slot, by `host:port`; empty until first learnt.
    owners: Vec<Option<String>>,
    /// When the table was last learnt (or tried).
    learnt: Option<Instant>,
}

/// A Redis Cluster member (see the module docs).
pub(crate) struct ClusterMember {
    /// The member's display name: `cluster:<seeds>`.
    name: String,
    /// The addresses given in its URL.
    seeds: Vec<(String, u16)>,
    /// Every connection's settings but the address (credentials, TCP settings).
    template: ConnectionInfo,
    connect_timeout: Duration,
    coalescing: Yield,
    table: Mutex<Table>,
    /// One learning of the table at a time.
    learning: tokio::sync::Mutex<()>,
    /// The cluster's node timeout, in milliseconds (see the module docs).
    node_timeout_ms: AtomicU64,
    /// Told the name and durability of every connect of every shard (see `Node::on_facts`).
    on_facts: OnceLock<FactsHook>,
    /// Itself, for the shards' nodes, which ask it to learn the table again.
    this: Weak<ClusterMember>,
}

impl std::fmt::Debug for ClusterMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterMember")
            .field("name", &self.name)
            .finish()
    }
}

impl ClusterMember {
    pub(crate) fn new(
        name: String,
        seeds: Vec<(String, u16)>,
        template: ConnectionInfo,
        connect_timeout: Duration,
        coalescing: Yield,
    ) -> Arc<Self> {
        Arc::new_cyclic(|this| ClusterMember {
            name,
            seeds,
            template,
            connect_timeout,
            coalescing,
            table: Mutex::new(Table::default()),
            learning: tokio::sync::Mutex::new(()),
            node_timeout_ms: AtomicU64::new(millis(DEFAULT_NODE_TIMEOUT)),
            on_facts: OnceLock::new(),
            this: this.clone(),
        })
    }

    /// A client for the server at `host:port`, with the member's settings.
    pub(crate) fn client_at(&self, host: &str, port: u16) -> RedisResult<Client> {
        let info = (self.template.clone()).set_addr(ConnectionAddr::Tcp(host.to_owned(), port));
        Client::open(info)
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Calls `hook` after every connect of every shard, present and future.
    pub(crate) fn on_facts(&self, hook: FactsHook) {
        for node in self.lock().shards.values() {
            node.on_facts(Arc::clone(&hook));
        }
        let _ = self.on_facts.set(hook);
    }

    /// The master that owns `slot`, learning the table first if it never was; `None` when
    /// no master is known to own it.
    pub(crate) async fn seat(&self, slot: u16) -> Option<Arc<Node>> {
        if self.lock().learnt.is_none() {
            self.learn().await;
        }
        self.owner(slot)
    }

    /// The node of the master that owns `slot` in the table as it stands.
    fn owner(&self, slot: u16) -> Option<Arc<Node>> {
        let table = self.lock();
        let owner = table.owners.get(usize::from(slot))?.as_ref()?;
        table.shards.get(owner).cloned()
    }

    /// The `host:port` of every master that owns a slot in the table, sorted (the table
    /// learnt first if it never was).
    pub(crate) async fn owners(&self) -> Vec<String> {
        if self.lock().learnt.is_none() {
            self.learn().await;
        }
        let mut owners: Vec<String> = self.lock().owners.iter().flatten().cloned().collect();
        owners.sort();
        owners.dedup();
        owners
    }

    /// Every shard master named so far.
    pub(crate) fn shards(&self) -> Vec<Arc<Node>> {
        self.lock().shards.values().cloned().collect()
    }

    /// Asks the known masters, then the seeds, for `CLUSTER SLOTS` until one answers, and
    /// puts its answer in the table. A table no server gives stays as it was.
    async fn learn(&self) {
        let _one = self.learning.lock().await;
        if (self.lock().learnt).is_some_and(|at| at.elapsed() < REFRESH_INTERVAL) {
            return;
        }
        let mut candidates: Vec<(String, u16)> = {
            let table = self.lock();
            let mut known: Vec<&String> = table.shards.keys().collect();
            known.sort();
            known.into_iter().filter_map(|a| split_addr(a)).collect()
        };
        candidates.extend(self.seeds.iter().cloned());
        for (host, port) in candidates {
            match tokio::time::timeout(self.connect_timeout, self.ask_slots(&host, port)).await {
                Ok(Ok(ranges)) if !ranges.is_empty() => {
                    self.install(&ranges);
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(member = %self.name, %host, port, error = %e, "CLUSTER SLOTS failed")
                }
                _ => {}
            }
        }
        self.lock().learnt = Some(Instant::now());
        tracing::warn!(member = %self.name, "no server of the cluster gave its slot table");
    }

    /// `CLUSTER SLOTS` (and the node timeout) from the server at `host:port`.
    async fn ask_slots(&self, host: &str, port: u16) -> RedisResult<Vec<SlotRange>> {
        let client = self.client_at(host, port)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let reply: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await?;
        let timeout: RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("cluster-node-timeout")
            .query_async(&mut conn)
            .await;
        if let Some(ms) = timeout.ok().and_then(|v| v.get(1)?.parse::<u64>().ok()) {
            self.node_timeout_ms.store(ms, Ordering::Relaxed);
        }
        Ok(slot_ranges(&reply, host))
    }

    /// Puts `ranges` in the table, making a node for each master not named before.
    fn install(&self, ranges: &[SlotRange]) {
        let mut table = self.lock();
        let mut owners = vec![None; usize::from(SLOTS)];
        for range in ranges {
            let addr = format!("{}:{}", range.host, range.port);
            if !table.shards.contains_key(&addr) {
                let node = self.shard_node(&range.host, range.port);
                table.shards.insert(addr.clone(), node);
            }
            for slot in range.first..=range.last.min(SLOTS - 1) {
                if let Some(owner) = owners.get_mut(usize::from(slot)) {
                    *owner = Some(addr.clone());
                }
            }
        }
        table.owners = owners;
        table.learnt = Some(Instant::now());
    }

    /// A node for the shard master at `host:port`.
    fn shard_node(&self, host: &str, port: u16) -> Arc<Node> {
        let member = match self.client_at(host, port) {
            Ok(client) => Member::Shard(client, self.this.clone() as Weak<dyn ShardOf>),
            // An address the driver cannot use: a node that never connects.
            Err(e) => Member::Unusable(e.to_string()),
        };
        let name = format!("{host}:{port}");
        let node = Arc::new(Node::new(
            name,
            member,
            self.connect_timeout,
            self.coalescing,
        ));
        if let Some(hook) = self.on_facts.get() {
            node.on_facts(Arc::clone(hook));
        }
        node
    }
}

impl ShardOf for ClusterMember {
    /// The cluster's node timeout (see the module docs).
    fn promotion_grace(&self) -> Duration {
        Duration::from_millis(self.node_timeout_ms.load(Ordering::Relaxed))
    }

    /// Learns the table again in the background, at most every [`REFRESH_INTERVAL`].
    fn relearn_soon(&self) {
        let due = (self.lock().learnt).is_none_or(|at| at.elapsed() >= REFRESH_INTERVAL);
        let (Some(member), Ok(handle)) =
            (self.this.upgrade(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        if due {
            handle.spawn(async move { member.learn().await });
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `host:port` split (the port after the last colon).
fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

/// One range of slots and the master that serves it, from `CLUSTER SLOTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotRange {
    pub(crate) first: u16,
    pub(crate) last: u16,
    pub(crate) host: String,
    pub(crate) port: u16,
}

/// The ranges of a `CLUSTER SLOTS` reply; a master whose host is empty (or `?`) is at
/// `asked`, the server that answered. Entries that do not parse are left out.
pub(crate) fn slot_ranges(reply: &Value, asked: &str) -> Vec<SlotRange> {
    let Value::Array(entries) = reply else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let Value::Array(fields) = entry else {
                return None;
            };
            let (first, last) = (int(fields.first()?)?, int(fields.get(1)?)?);
            let Value::Array(master) = fields.get(2)? else {
                return None;
            };
            let host = match text(master.first()?)? {
                h if h.is_empty() || h == "?" => asked.to_owned(),
                h => h.to_ascii_lowercase(),
            };
            Some(SlotRange {
                first: u16::try_from(first).ok()?,
                last: u16::try_from(last).ok()?,
                host,
                port: u16::try_from(int(master.get(1)?)?).ok()?,
            })
        })
        .collect()
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_slots_reply_gives_each_range_its_master() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                Value::Array(vec![bulk(""), Value::Int(7001)]),
            ]),
            Value::Array(vec![Value::Int(1)]),
            bulk("junk"),
        ]);
        assert_eq!(
            slot_ranges(&reply, "10.0.0.9"),
            vec![
                SlotRange {
                    first: 0,
                    last: 5460,
                    host: "127.0.0.1".into(),
                    port: 7000
                },
                SlotRange {
                    first: 5461,
                    last: 10922,
                    host: "10.0.0.9".into(),
                    port: 7001
                },
            ]
        );
        assert!(slot_ranges(&Value::Nil, "h").is_empty());
    }
}
