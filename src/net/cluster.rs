//! A member that is a whole Redis Cluster: its slot table, learnt from `CLUSTER SLOTS`,
//! and one [`Node`] per shard master it has named, each a plain server connection. A lock
//! goes to the master that owns its keys' slot (`Ensemble::seated`); the member does not
//! follow `MOVED` or `ASK` itself: a redirected request does not vote, and the table is
//! learnt again in the background, so the next attempt goes to the new owner.
//!
//! A failover puts a promoted replica in a master's place, and the old master may go on
//! accepting writes until it learns of the promotion: for as long as it is partitioned
//! with clients of its own, or, paused (a stalled host), for the moment after it resumes.
//! So, as for a member under Sentinel (`net::sentinel`), a vote counts only while the
//! masters confirm it: every round asks every master the table names for its `CLUSTER
//! SLOTS` and `INFO`, and a node's vote for a lock counts only if more than half of the
//! masters asked other than itself, in a round that started less than a confirmation
//! window (`rules::sentinel::CONFIRM_WINDOW`) before the vote is judged, named it owner of
//! the lock's slot (`rules::cluster::confirmed_owners`, `Ensemble::vouches`). A master's
//! word about itself is no evidence, and each other master's view only moves forward
//! (config epochs), so the Sentinel argument holds with the other masters as the
//! sentinels; the promoted master is quarantined from a window after this client learnt
//! it (`Node::learn_facts`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Client, ConnectionAddr, ConnectionInfo, RedisResult, Value};
use tokio::time::Instant;

use futures::future::{BoxFuture, Shared};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};

use crate::net::coalesce::Yield;
use crate::net::member::{Member, Unusable};
use crate::net::node::Node;
use crate::net::replica_acks::ReplicaAcks;
use crate::net::server_facts::{FactsHook, life_in};
use crate::net::shard::{ShardCluster, ShardMaster};
use crate::net::timely;
use crate::protocol::slots::SLOTS;
use crate::rules::cluster::{confirmed_owners, settled};
use crate::rules::sentinel::{CONFIRM_WINDOW, vouched};

/// How often the slot table is learnt again at most, however many requests ask for it.
const REFRESH_INTERVAL: Duration = Duration::from_millis(100);

/// The shard masters a member's slot table names, by address, and which owns each slot.
#[derive(Default)]
struct Table {
    /// Every shard master named so far, by `host:port` (never removed: a guard may still
    /// hold one).
    shards: HashMap<String, Arc<Node>>,
    /// The owner of each slot, by `host:port`, where requests go: the owner last confirmed
    /// (`None`: none yet, and a request for the slot goes to the member's first seed, which
    /// votes no); empty until first learnt.
    owners: Vec<Option<Arc<str>>>,
    /// When the table was last learnt (or tried).
    learnt: Option<Instant>,
    /// Per slot, its last confirmation: when its round started, and the owner more than
    /// half of the other masters asked named (see `rules::cluster::confirmed_owners`);
    /// empty until first confirmed.
    confirmed: Vec<Option<(Instant, Arc<str>)>>,
    /// Per master, by `host:port`, the life it last answered a round in (see
    /// `server_facts::life_in`) and when that round started.
    lives: HashMap<String, (Instant, String)>,
    /// Per master, by `host:port`, when the last round that confirmed it owner of a slot,
    /// and that it answered, started.
    fresh: HashMap<String, Instant>,
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
    /// The client's key prefix (see `Node::new`).
    key_prefix: Arc<str>,
    /// What each shard master's votes wait for (see `Node::with_replica_acks`).
    replica_acks: Option<ReplicaAcks>,
    table: Mutex<Table>,
    /// One learning of the table at a time.
    learning: tokio::sync::Mutex<()>,
    /// The round under way that requests wait for, if any (spawned: it runs to its end).
    round: Mutex<Option<Shared<BoxFuture<'static, ()>>>>,
    /// Woken whenever a round puts confirmations in the table.
    installed: tokio::sync::Notify,
    /// Per master, by `host:port`, the connection the rounds ask it on.
    round_connections: Mutex<HashMap<String, MultiplexedConnection>>,
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
        key_prefix: Arc<str>,
        replica_acks: Option<ReplicaAcks>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|this| ClusterMember {
            name,
            seeds,
            template,
            connect_timeout,
            coalescing,
            key_prefix,
            replica_acks,
            table: Mutex::new(Table::default()),
            learning: tokio::sync::Mutex::new(()),
            round: Mutex::new(None),
            installed: tokio::sync::Notify::new(),
            round_connections: Mutex::new(HashMap::new()),
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
            self.learn(false).await;
        }
        self.owner(slot)
    }

    /// The node of the master that owns `slot` in the table as it stands.
    fn owner(&self, slot: u16) -> Option<Arc<Node>> {
        let table = self.lock();
        let owner = table.owners.get(usize::from(slot))?.as_ref()?;
        table.shards.get(&**owner).cloned()
    }

    /// The `host:port` of every master that owns a slot in the table, sorted (the table
    /// learnt first if it never was).
    pub(crate) async fn owners(&self) -> Vec<String> {
        if self.lock().learnt.is_none() {
            self.learn(false).await;
        }
        let table = self.lock();
        let mut owners: Vec<String> = table
            .owners
            .iter()
            .flatten()
            .map(|o| o.to_string())
            .collect();
        owners.sort();
        owners.dedup();
        owners
    }

    /// For each shard master that owns a slot (see [`owners`](Self::owners)), its `INFO
    /// replication` text, asked on a connection of its own; `None` for a master that gave
    /// none within the connect timeout.
    pub(crate) async fn shard_replication(&self) -> Vec<(String, Option<String>)> {
        let owners = self.owners().await;
        let asked = owners.into_iter().map(|owner| async move {
            let info = match split_addr(&owner) {
                Some((host, port)) => {
                    let asked = self.info_replication(&host, port);
                    tokio::time::timeout(self.connect_timeout, asked)
                        .await
                        .ok()
                        .and_then(Result::ok)
                }
                None => None,
            };
            (owner, info)
        });
        futures::future::join_all(asked).await
    }

    /// A connection of its own to the server at `host:port`, with the member's settings
    /// (the rounds' and the deployment check's questions, never a lock's requests).
    async fn connection_to(&self, host: &str, port: u16) -> RedisResult<MultiplexedConnection> {
        self.client_at(host, port)?
            .get_multiplexed_async_connection()
            .await
    }

    /// `INFO replication` from the server at `host:port`.
    async fn info_replication(&self, host: &str, port: u16) -> RedisResult<String> {
        let mut conn = self.connection_to(host, port).await?;
        redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
    }

    /// Each master that owns a slot in the table (learnt first if it never was), with the
    /// first slot it owns: where a readmission probe reaches that master.
    pub(crate) async fn owner_first_slots(&self) -> Vec<(Arc<Node>, u16)> {
        if self.lock().learnt.is_none() {
            self.learn(false).await;
        }
        let table = self.lock();
        let mut firsts: Vec<(Arc<Node>, u16)> = Vec::new();
        for (slot, owner) in (0..SLOTS).zip(&table.owners) {
            let Some(node) = owner.as_ref().and_then(|o| table.shards.get(&**o)) else {
                continue;
            };
            if !firsts.iter().any(|(n, _)| Arc::ptr_eq(n, node)) {
                firsts.push((Arc::clone(node), slot));
            }
        }
        firsts
    }

    /// Learns the table again now, whenever it was last learnt: a held lock's request was
    /// redirected, and it follows its slot.
    pub(crate) async fn learn_now(&self) {
        self.learn(true).await;
    }

    /// Every shard master named so far.
    pub(crate) fn shards(&self) -> Vec<Arc<Node>> {
        self.lock().shards.values().cloned().collect()
    }

    /// One round: asks every master the table names (at first, the masters the first seed
    /// to answer names) for `CLUSTER SLOTS`, at once, and puts in the table, as answers
    /// come, per slot the owner more than half of the other masters asked name, as its
    /// confirmation and where requests go. It ends once every master answered or the
    /// connect timeout passed, or as soon as no answer to come can change its outcome
    /// (`rules::cluster::settled`) and every owner it confirms answered it too (an owner's
    /// vote needs its own answer, see `vouches`): a silent master holds back no
    /// confirmation, and costs a round nothing once the others settle it. Slots it does not confirm keep their
    /// last confirmation, which ages out. Skipped when the table was learnt less than
    /// [`REFRESH_INTERVAL`] ago, unless `now`.
    async fn learn(&self, now: bool) {
        let _one = self.learning.lock().await;
        if !now && (self.lock().learnt).is_some_and(|at| at.elapsed() < REFRESH_INTERVAL) {
            return;
        }
        let started = Instant::now();
        let mut masters = self.masters();
        if masters.is_empty() {
            masters = distinct_masters(&self.first_seed_answer().await);
        }
        // Each answer counts only when read within the connect timeout (see `timely`).
        let deadline = crate::rules::deadline::after(Instant::now(), self.connect_timeout);
        let mut asks: FuturesUnordered<_> =
            (masters.iter().enumerate())
                .map(|(i, (host, port))| async move {
                    (i, self.ask_within(deadline, host, *port).await)
                })
                .collect();
        let mut answers: Vec<Option<Answer>> = vec![None; masters.len()];
        while let Some((i, answer)) = asks.next().await {
            let Some(answer) = answer else {
                continue;
            };
            if let Some(slot) = answers.get_mut(i) {
                *slot = Some(answer);
            }
            if self.install(&masters, &answers, i, started) {
                break;
            }
        }
        self.lock().learnt = Some(Instant::now());
    }

    /// `CLUSTER SLOTS` and the life of the master at `host:port`, when it answers with a
    /// table before `deadline`.
    async fn ask_within(&self, deadline: Instant, host: &str, port: u16) -> Option<Answer> {
        let answer = timely::within(deadline, self.ask_slots(host, port)).await;
        if answer.is_none() {
            // No answer in time: a connection with a question pending is not kept.
            self.forget_round_connection(&format!("{host}:{port}"));
        }
        match answer {
            Some(Ok((ranges, life))) if !ranges.is_empty() => {
                Some((format!("{host}:{port}"), ranges, life))
            }
            Some(Err(e)) => {
                tracing::debug!(member = %self.name, %host, port, error = %e, "CLUSTER SLOTS failed");
                None
            }
            _ => None,
        }
    }

    /// The masters the table names now, `(host, port)`, sorted.
    fn masters(&self) -> Vec<(String, u16)> {
        let table = self.lock();
        let mut named: Vec<&str> = table.owners.iter().flatten().map(|o| &**o).collect();
        named.sort_unstable();
        named.dedup();
        named.into_iter().filter_map(split_addr).collect()
    }

    /// The slot table of the first seed that gives one (empty: none did).
    async fn first_seed_answer(&self) -> Vec<SlotRange> {
        for (host, port) in &self.seeds {
            let answer = tokio::time::timeout(self.connect_timeout, self.ask_slots(host, *port));
            match answer.await {
                Ok(Ok((ranges, _))) if !ranges.is_empty() => return ranges,
                Err(_) => self.forget_round_connection(&format!("{host}:{port}")),
                _ => {}
            }
        }
        tracing::warn!(member = %self.name, "no seed of the cluster gave its slot table");
        Vec::new()
    }

    /// `CLUSTER SLOTS` from the server at `host:port`, and the life it answers in.
    /// Asked on the connection kept for the rounds (made first when there is none, and
    /// dropped when the question fails); only the two `INFO` sections the life is read
    /// from.
    async fn ask_slots(
        &self,
        host: &str,
        port: u16,
    ) -> RedisResult<(Vec<SlotRange>, Option<String>)> {
        let addr = format!("{host}:{port}");
        let kept = self.kept_round_connection(&addr);
        let mut conn = match kept {
            Some(conn) => conn,
            None => {
                let conn = self.connection_to(host, port).await?;
                self.lock_rounds().insert(addr.clone(), conn.clone());
                conn
            }
        };
        let asked = redis::pipe()
            .cmd("CLUSTER")
            .arg("SLOTS")
            .cmd("INFO")
            .arg("server")
            .cmd("INFO")
            .arg("replication")
            .query_async::<(Value, String, String)>(&mut conn)
            .await;
        let (reply, server, replication) =
            asked.inspect_err(|_| self.forget_round_connection(&addr))?;
        let life = life_in(&format!("{server}\r\n{replication}"));
        Ok((slot_ranges(&reply, host), life))
    }

    /// The connection kept for the rounds' questions to the master at `addr`, if any.
    fn kept_round_connection(&self, addr: &str) -> Option<MultiplexedConnection> {
        self.lock_rounds().get(addr).cloned()
    }

    /// Drops the connection kept for the rounds' questions to the master at `addr`: the
    /// next round connects again.
    fn forget_round_connection(&self, addr: &str) {
        self.lock_rounds().remove(addr);
    }

    fn lock_rounds(&self) -> MutexGuard<'_, HashMap<String, MultiplexedConnection>> {
        self.round_connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Puts a round's `answers` so far (one per master `asked`, in order; `None` for one
    /// yet to answer or silent) in the table, the round started at `started` and answer
    /// `new` the latest: the life that master answered in (dropping its node's connection
    /// when that knows another), and per slot the owner the answers confirm, making a node
    /// for each master not named before. Returns whether the round has settled.
    fn install(
        &self,
        asked: &[(String, u16)],
        answers: &[Option<Answer>],
        new: usize,
        started: Instant,
    ) -> bool {
        // Judged per segment of slots that every answer gives one owner: a few, where
        // judging each of the 16384 slots after every answer would cost milliseconds.
        let segments = segment_starts(answers);
        let reports: Vec<(Arc<str>, Option<Owners>)> = (asked.iter())
            .zip(answers)
            .map(|((host, port), a)| {
                let report = a.as_ref().map(|(_, r, _)| owner_per_segment(r, &segments));
                (Arc::from(format!("{host}:{port}")), report)
            })
            .collect();
        let agreed = confirmed_owners(&reports, segments.len());
        // An owner's vote counts only once it answered the round too (see `vouches`).
        let owners_answered = (agreed.iter().flatten()).all(|owner| {
            answers
                .iter()
                .flatten()
                .any(|(addr, _, _)| **addr == **owner)
        });
        let settled = owners_answered && settled(&reports, &agreed);
        let mut table = self.lock();
        table.learnt = Some(Instant::now());
        if let Some(Some((addr, _, Some(life)))) = answers.get(new) {
            table.lives.insert(addr.clone(), (started, life.clone()));
            if let Some(node) = table.shards.get(addr)
                && node.known().run_id().is_some_and(|known| *known != **life)
            {
                node.drop_connection();
            }
        }
        self.confirm_owners(&mut table, &segments, &agreed, started);
        drop(table);
        self.installed.notify_waiters();
        settled
    }

    /// Puts `agreed`, a round's confirmed owner per segment of slots (starting at
    /// `segments`; `None`: not confirmed), in `table` as the round started at `started`
    /// confirms them. Requests go only to confirmed owners, so that a promoted master is
    /// learnt (and its quarantine starts) no sooner than it is confirmed.
    fn confirm_owners(
        &self,
        table: &mut Table,
        segments: &[u16],
        agreed: &[Option<Arc<str>>],
        started: Instant,
    ) {
        let slots = usize::from(SLOTS);
        table.owners.resize(slots, None);
        table.confirmed.resize(slots, None);
        let mut named: Vec<Arc<str>> = Vec::new();
        let ends = segments.iter().skip(1).copied().chain([SLOTS]);
        for ((&first, end), owner) in segments.iter().zip(ends).zip(agreed) {
            let Some(owner) = owner else {
                continue;
            };
            if !named.contains(owner) {
                named.push(Arc::clone(owner));
            }
            let range = usize::from(first)..usize::from(end);
            for route in table.owners.get_mut(range.clone()).into_iter().flatten() {
                *route = Some(Arc::clone(owner));
            }
            for confirmed in table.confirmed.get_mut(range).into_iter().flatten() {
                *confirmed = Some((started, Arc::clone(owner)));
            }
        }
        for addr in named {
            if !table.shards.contains_key(&*addr)
                && let Some((host, port)) = split_addr(&addr)
            {
                let node = self.shard_node(&host, port);
                table.shards.insert(addr.to_string(), node);
            }
            if table
                .lives
                .get(&*addr)
                .is_some_and(|(at, _)| *at >= started)
            {
                table.fresh.insert(addr.to_string(), started);
            }
        }
    }

    /// A node for the shard master at `host:port`.
    fn shard_node(&self, host: &str, port: u16) -> Arc<Node> {
        let member: Member = match self.client_at(host, port) {
            Ok(client) => Box::new(ShardMaster::new(
                client,
                self.this.clone() as Weak<dyn ShardCluster>,
            )),
            // An address the driver cannot use: a node that never connects.
            Err(e) => Box::new(Unusable(e.to_string())),
        };
        let name = format!("{host}:{port}");
        let node = Arc::new(
            Node::new(
                name,
                member,
                self.connect_timeout,
                self.coalescing,
                Arc::clone(&self.key_prefix),
            )
            .with_replica_acks(self.replica_acks),
        );
        if let Some(hook) = self.on_facts.get() {
            node.on_facts(Arc::clone(hook));
        }
        node
    }
}

impl ClusterMember {
    /// The round under way, or a new one, spawned so that it runs to its end whoever
    /// waits for it.
    fn round(&self) -> Shared<BoxFuture<'static, ()>> {
        let mut current = self.round.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(round) = &*current {
            return round.clone();
        }
        let Some(member) = self.this.upgrade() else {
            return async {}.boxed().shared();
        };
        let learn = async move {
            member.learn(false).await;
            *member.round.lock().unwrap_or_else(|p| p.into_inner()) = None;
        };
        let round = crate::net::shared_task::spawn_shared(learn);
        *current = Some(round.clone());
        round
    }

    /// Returns once a round started less than half a window ago confirmed `node` owner of
    /// a slot (see `install`).
    async fn freshly_confirmed(&self, node: &str) {
        loop {
            let installed = self.installed.notified();
            tokio::pin!(installed);
            installed.as_mut().enable();
            if self
                .confirmation_age(node)
                .is_some_and(|age| age < CONFIRM_WINDOW / 2)
            {
                return;
            }
            installed.await;
        }
    }
}

impl ShardCluster for ClusterMember {
    /// A confirmation that started less than a confirmation window ago names the node
    /// owner, and it answered that round (or a later one) in the same life (a connection
    /// kept across a demotion and a new promotion knows an old one).
    fn vouches(&self, slot: u16, node: &str, life: Option<&str>) -> bool {
        let table = self.lock();
        let Some((at, owner)) = table.confirmed.get(usize::from(slot)).cloned().flatten() else {
            return false;
        };
        let answered = table.lives.get(node);
        if answered.map(|(_, l)| l.as_str()) != life || answered.is_none_or(|(a, _)| *a < at) {
            return false;
        }
        let confirmed = (at.into_std(), &*owner);
        vouched(Some(&confirmed), Some(&node), std::time::Instant::now())
    }

    fn confirmation_age(&self, node: &str) -> Option<Duration> {
        self.lock().fresh.get(node).map(Instant::elapsed)
    }

    /// At most every [`REFRESH_INTERVAL`].
    fn relearn_soon(&self) {
        let due = (self.lock().learnt).is_none_or(|at| at.elapsed() >= REFRESH_INTERVAL);
        if due && tokio::runtime::Handle::try_current().is_ok() {
            drop(self.round());
        }
    }

    fn owned_slot(&self, node: &str) -> Option<u16> {
        let table = self.lock();
        let slot =
            (table.confirmed.iter()).position(|c| c.as_ref().is_some_and(|(_, o)| **o == *node))?;
        u16::try_from(slot).ok()
    }

    /// The round under way or a new one (see `learn`).
    fn confirm(&self, node: &str) -> BoxFuture<'static, ()> {
        let round = self.round();
        let (member, node) = (self.this.upgrade(), node.to_owned());
        async move {
            let Some(member) = member else {
                return round.await;
            };
            let confirmed = member.freshly_confirmed(&node);
            futures::pin_mut!(confirmed);
            futures::future::select(round, confirmed).await;
        }
        .boxed()
    }
}

/// The distinct masters of `ranges`, `(host, port)`, sorted.
fn distinct_masters(ranges: &[SlotRange]) -> Vec<(String, u16)> {
    let mut masters: Vec<(String, u16)> = ranges.iter().map(|r| (r.host.clone(), r.port)).collect();
    masters.sort();
    masters.dedup();
    masters
}

/// The owner, by `host:port`, of the first slot of each segment (see [`segment_starts`])
/// in `ranges` (`None`: no range covers it).
fn owner_per_segment(ranges: &[SlotRange], segments: &[u16]) -> Vec<Option<Arc<str>>> {
    let addrs: Vec<Arc<str>> = (ranges.iter())
        .map(|r| Arc::from(format!("{}:{}", r.host, r.port)))
        .collect();
    (segments.iter())
        .map(|&slot| {
            // The last range that covers it, as a table written range after range would say.
            let covering = ranges
                .iter()
                .rposition(|r| r.first <= slot && slot <= r.last)?;
            addrs.get(covering).cloned()
        })
        .collect()
}

/// The first slot of every segment of slots over which each of `answers` names one owner
/// (or none), sorted: 0 and every slot where a range of an answer starts or after one
/// ends.
fn segment_starts(answers: &[Option<Answer>]) -> Vec<u16> {
    let mut starts: Vec<u16> = vec![0];
    for (_, ranges, _) in answers.iter().flatten() {
        for range in ranges {
            starts.push(range.first.min(SLOTS));
            starts.push(range.last.saturating_add(1).min(SLOTS));
        }
    }
    starts.retain(|&s| s < SLOTS);
    starts.sort_unstable();
    starts.dedup();
    starts
}

/// `host:port` split (the port after the last colon).
fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

/// The owner of every segment of slots, by `host:port`.
type Owners = Vec<Option<Arc<str>>>;

/// One master's answer to a round: its `host:port`, its slot table, its life.
type Answer = (String, Vec<SlotRange>, Option<String>);

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

    fn range(first: u16, last: u16, port: u16) -> SlotRange {
        SlotRange {
            first,
            last,
            host: "h".into(),
            port,
        }
    }

    #[test]
    fn answers_are_judged_per_segment_of_one_owner_each() {
        let answer = |ranges| Some((String::from("a"), ranges, None));
        let answers = [
            answer(vec![range(0, 8191, 1), range(8192, 16383, 2)]),
            None,
            // Slot 100 moved to port 3 in this master's view; from 8192 on it names none.
            answer(vec![
                range(0, 99, 1),
                range(100, 100, 3),
                range(101, 8191, 1),
            ]),
        ];
        let segments = segment_starts(&answers);
        assert_eq!(segments, vec![0, 100, 101, 8192]);
        let ports = |ranges: &[SlotRange]| -> Vec<Option<String>> {
            owner_per_segment(ranges, &segments)
                .into_iter()
                .map(|o| o.map(|a| a.to_string()))
                .collect()
        };
        let third = &answers[2].as_ref().unwrap().1;
        let owners = ports(third);
        assert_eq!(
            owners,
            vec![
                Some("h:1".into()),
                Some("h:3".into()),
                Some("h:1".into()),
                None
            ]
        );
    }
}
