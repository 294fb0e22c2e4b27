//! One Redis node and the lifecycle of its connection: made lazily on the first request,
//! shared by every request, replaced when it breaks or its runtime is gone, closed at
//! shutdown; and [`Node::send`], one request bounded by its caller.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, RedisResult, Value};
use tokio::time::Instant;

use crate::net::call::{Call, SendError};
use crate::net::coalesce::Yield;
use crate::net::failure::{NodeFailure, classify};
use crate::net::member::Member;
use crate::net::replica_acks::ReplicaAcks;
use crate::net::sentinel::Survey;
use crate::net::server_facts::{FactsHook, KnownServer, ServerFacts, learn_capabilities};
use crate::protocol;
use crate::protocol::native::Capabilities;
use crate::rules::sentinel::promoted_life_start;

type ConnectResult = Result<(u64, MultiplexedConnection), ConnectError>;

/// Why a connect produced no connection.
#[derive(Debug, Clone)]
enum ConnectError {
    /// The server refused, did not answer in time, or failed the handshake.
    Failed(String),
    /// The connect task ended without an answer: its runtime shut down (or it panicked).
    /// Nothing was tried on the server's side that a new connect would repeat badly, so the
    /// request that saw this connects again at once.
    Abandoned(String),
}

impl ConnectError {
    fn message(self) -> String {
        match self {
            ConnectError::Failed(m) | ConnectError::Abandoned(m) => m,
        }
    }
}

/// How long past its connect timeout a connect may stay unfinished before a request starts
/// another: its task may sit in a runtime that is no longer driven (one that is neither
/// running nor dropped), where it would never finish nor time out.
const STALE_CONNECT_GRACE: Duration = Duration::from_secs(1);

/// How many requests the driver's channel to its connection task holds. The channel is
/// first come, first served only while it has room: a request that has to wait for room is
/// put in it when its future is next polled, possibly after a later request (a release)
/// that found room. Large enough never to fill (a node that stops reading holds at most
/// what is sent to it until the TCP user timeout drops its connection), so every request
/// is queued at its first poll, in poll order, which the release ordering relies on (see
/// [`SendGate`](super::send_gate::SendGate)). Slots are allocated as used, not up front.
const PIPELINE_BUFFER: usize = 1 << 20;

/// The connection state of a node.
enum Slot {
    /// No connection; the next request connects.
    Empty,
    /// A working connection, tagged with a generation so a request that saw it fail can
    /// discard exactly that one and not a newer replacement, and with the liveness of the
    /// runtime its driver task runs on.
    Ready(u64, MultiplexedConnection, Liveness),
    /// A connect in progress that every concurrent request waits on, and when it started
    /// (a runtime-independent clock: see [`STALE_CONNECT_GRACE`]).
    Connecting {
        generation: u64,
        started: std::time::Instant,
        connect: Shared<BoxFuture<'static, ConnectResult>>,
    },
}

/// What a request finds in a node's slot.
enum Pending {
    Ready(u64, MultiplexedConnection),
    Wait(Shared<BoxFuture<'static, ConnectResult>>),
    /// The client was shut down ([`Node::close`]): no connection is made any more.
    Closed,
}

/// Whether the runtime a connection's driver task was spawned on still runs: a task of our
/// own on that runtime that never ends by itself. A runtime that shuts down drops its
/// tasks, the driver among them, and the connection can no longer send; this is known
/// before anything is sent on it, so it is replaced without a failed request (a client
/// kept in a `static` and used from several runtimes, one per `#[tokio::test]`).
#[derive(Debug)]
struct Liveness(Option<tokio::task::JoinHandle<()>>);

impl Liveness {
    /// A sentinel on the current runtime (none without one: then always "alive").
    fn here() -> Self {
        Liveness(
            tokio::runtime::Handle::try_current()
                .ok()
                .map(|handle| handle.spawn(std::future::pending())),
        )
    }

    fn is_alive(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|sentinel| !sentinel.is_finished())
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        if let Some(sentinel) = &self.0 {
            sentinel.abort();
        }
    }
}

/// One node of the ensemble: its address, its connection, and what its connects learnt.
pub(crate) struct Node {
    /// `host:port`, without credentials (`sentinel:<service>@<sentinels>` for a Sentinel
    /// member).
    name: String,
    member: Member,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
    /// How the connection's writes yield to let other tasks' requests share them.
    coalescing: Yield,
    /// The client's key prefix, for the node's promotion record.
    key_prefix: Arc<str>,
    slot: Mutex<Slot>,
    generation: AtomicU64,
    /// What the client knows of the server behind the current connection, learnt on every
    /// (re)connect (see [`ServerFacts`]).
    known: KnownServer,
    /// The native commands of the server behind the current connection, learnt on every
    /// (re)connect (none until then: the scripts work everywhere).
    capabilities: Mutex<Capabilities>,
    /// The quarantine state last published as a gauge: 0 none yet, 1 counting, 2
    /// quarantined.
    published: AtomicU8,
    /// Set by the client's shutdown: the connection is dropped and never made again.
    closed: AtomicBool,
    /// An acquire script's answer that came after its attempt's decision is being read (see
    /// `vote_round::read_late_records`): at most one such reader per node.
    reading_late: AtomicBool,
    /// Told the node's name and durability every time a connect learnt its facts.
    on_facts: OnceLock<FactsHook>,
    /// For a Sentinel member or a Cluster shard master: the replicas' acknowledgements a
    /// vote's write waits for, if the client asks for them.
    replica_acks: Option<ReplicaAcks>,
}

/// A node's claim on reading its late acquire answers (see
/// [`Node::claim_reading_late`]), given back when dropped.
pub(crate) struct ReadingLate(Arc<Node>);

impl ReadingLate {
    pub(crate) fn node(&self) -> &Arc<Node> {
        &self.0
    }
}

impl Drop for ReadingLate {
    fn drop(&mut self) {
        self.0.reading_late.store(false, Ordering::Release);
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("name", &self.name).finish()
    }
}

impl Node {
    pub(crate) fn new(
        name: String,
        member: Member,
        connect_timeout: Duration,
        coalescing: Yield,
        key_prefix: Arc<str>,
    ) -> Self {
        // Both timeouts are set explicitly so the driver's defaults never apply by accident.
        // No response timeout in the driver: every request is bounded by its round's
        // deadline (one timer for all nodes of a round) or by its caller's, and a second
        // timer per request would only cost.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None)
            .set_pipeline_buffer_size(PIPELINE_BUFFER);
        Node {
            name,
            member,
            config,
            connect_timeout,
            coalescing,
            key_prefix,
            slot: Mutex::new(Slot::Empty),
            generation: AtomicU64::new(0),
            known: KnownServer::default(),
            capabilities: Mutex::new(Capabilities::default()),
            published: AtomicU8::new(0),
            closed: AtomicBool::new(false),
            reading_late: AtomicBool::new(false),
            on_facts: OnceLock::new(),
            replica_acks: None,
        }
    }

    /// This node's votes count only once `acks` confirms their writes (see
    /// [`ReplicaAcks`]); `None`: at once.
    pub(crate) fn with_replica_acks(mut self, acks: Option<ReplicaAcks>) -> Self {
        self.replica_acks = acks;
        self
    }

    /// Calls `hook` with the node's name and durability after every connect that learnt
    /// its facts (the first hook set stays).
    pub(crate) fn on_facts(&self, hook: FactsHook) {
        let _ = self.on_facts.set(hook);
    }

    /// Claims the one reader of this node's late acquire answers (see
    /// `vote_round::read_late_records`); `None` when one reads already. The claim is given back
    /// when the returned [`ReadingLate`] is dropped (the reader ended, or a stopped client's
    /// collector dropped it).
    pub(crate) fn claim_reading_late(self: &Arc<Self>) -> Option<ReadingLate> {
        let free = !self.reading_late.swap(true, Ordering::AcqRel);
        free.then(|| ReadingLate(Arc::clone(self)))
    }

    /// What this client knows of the server behind the current connection.
    pub(crate) fn known(&self) -> &KnownServer {
        &self.known
    }

    /// Learns the facts of the server behind a new connection (see [`ServerFacts::learn`]); a new
    /// `run_id` is logged and counted as a restart.
    async fn learn_facts(&self, conn: &mut MultiplexedConnection) -> RedisResult<()> {
        let mut facts = ServerFacts::learn(conn).await?;
        if let Some(life) = facts.run_id.clone().filter(|_| facts.promoted)
            && let Some(ago) = self.promotion_seen_ago(conn, &life).await
        {
            // The first client to learn this promoted life recorded when on the node: its
            // quarantine counts from then for every client, a new process's included.
            facts.at = facts.at.checked_sub(ago).unwrap_or(facts.at);
        }
        if self.member.fails_over() {
            // A client still connected to the old master may vote there up to a
            // confirmation window after this client learnt the new one (see
            // `net::sentinel`, `net::cluster`): the quarantine of any life learnt here
            // counts from then, a promoted replica's, and a restarted one's, which may
            // have been promoted moments before it restarted.
            facts.at = Instant::from_std(promoted_life_start(facts.at.into_std()));
        }
        if let Some(why) = &facts.refused {
            tracing::warn!(node = %self.name, %why, "node cannot vote: its identity is unknown");
        }
        let persistence = facts.persistence;
        if self.known.replace(facts) {
            tracing::info!(node = %self.name, "node in a new life (restarted, or promoted)");
            crate::metrics::node_restarted(&self.name);
        }
        if let Some(hook) = self.on_facts.get() {
            hook(&self.name, persistence);
        }
        Ok(())
    }

    /// How long ago a client first learnt the promoted life `life` of the server behind
    /// `conn`, by the node's clock, from its promotion record (written now by the first
    /// client); `None` when the record cannot be read or written (an ACL, a shard that
    /// owns no confirmed slot, a redirect): the quarantine then counts from now.
    async fn promotion_seen_ago(
        &self,
        conn: &mut MultiplexedConnection,
        life: &str,
    ) -> Option<Duration> {
        let tag = self.member.promotion_tag(&self.name)?;
        let key = protocol::keys::global(&self.key_prefix, protocol::keys::Global::Promoted, tag);
        crate::net::promotion_record::seen_ago(conn, &key, life).await
    }

    /// The native commands of the server behind the current connection.
    pub(crate) fn capabilities(&self) -> Capabilities {
        *self.capabilities.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a yes vote that was kept out (`reason`, a metric label) or counted (`None`),
    /// and publishes the node's quarantine gauge when its state changed.
    pub(crate) fn count_vote(&self, kept_out: Option<&'static str>) {
        if let Some(reason) = kept_out {
            crate::metrics::vote_quarantined(&self.name, reason);
        }
        let state = if kept_out.is_some() { 2 } else { 1 };
        if self.published.swap(state, Ordering::Relaxed) != state {
            crate::metrics::node_quarantined(&self.name, kept_out.is_some());
        }
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The driver client, for the connections of their own that a probe or a subscription
    /// opens: a Sentinel member's goes to the master its sentinels name now.
    pub(super) async fn client(&self) -> RedisResult<Client> {
        Ok(self.member.client(self.connect_timeout).await?.0)
    }

    /// Whether this node's votes may count now, for a lock in hash slot `slot` (`None`
    /// outside a view seated for one), as far as its membership goes: a Sentinel member's
    /// only while its sentinels confirm the connection's master, a Cluster shard's only
    /// while its cluster's masters confirm it owner of the slot in the connection's life
    /// (see [`Membership::vouches`](crate::net::member::Membership::vouches)).
    pub(crate) fn vouches(&self, slot: Option<u16>) -> bool {
        self.member.vouches(&self.name, slot, &self.known)
    }

    /// The master's `host:port` its membership last resolved (a Sentinel member's, as its
    /// sentinels named it).
    pub(crate) fn resolved_master(&self) -> Option<String> {
        self.member.resolved_master()
    }

    /// For a Sentinel member, each sentinel of its group as the member knows it and the
    /// master it names now (within `timeout`), and the group's size; `None` for others.
    pub(crate) async fn sentinel_survey(&self, timeout: Duration) -> Option<Survey> {
        Some(self.member.survey(timeout)?.await)
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn lock_slot(&self) -> MutexGuard<'_, Slot> {
        // The slot is only ever replaced whole, so a poisoned lock still holds a valid state.
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the connection (its driver ends once no request uses it) and makes no new one:
    /// every later request fails at once (client shutdown).
    pub(crate) fn close(&self) {
        let mut slot = self.lock_slot();
        self.closed.store(true, Ordering::Release);
        *slot = Slot::Empty;
    }

    /// The current connection, connecting first if there is none (or if the current one's
    /// runtime is gone). A connect whose task ended unfinished (its runtime shut down) is
    /// forgotten and made again at once, once.
    async fn connection(self: &Arc<Self>) -> Result<(u64, MultiplexedConnection), String> {
        let mut abandoned = String::new();
        for _ in 0..2 {
            let connect = match self.pending_connection() {
                Pending::Ready(generation, conn) => return Ok((generation, conn)),
                Pending::Wait(connect) => connect,
                Pending::Closed => return Err("the client was shut down".into()),
            };
            match connect.await {
                Ok(ready) => return Ok(ready),
                Err(ConnectError::Abandoned(m)) => abandoned = m,
                Err(e) => return Err(e.message()),
            }
        }
        Err(abandoned)
    }

    /// The connection at hand, or the connect to wait for, started if none usable is
    /// under way.
    fn pending_connection(self: &Arc<Self>) -> Pending {
        let mut slot = self.lock_slot();
        if self.closed.load(Ordering::Acquire) {
            return Pending::Closed;
        }
        match &*slot {
            Slot::Ready(generation, conn, alive) if alive.is_alive() => {
                return Pending::Ready(*generation, conn.clone());
            }
            Slot::Connecting {
                started, connect, ..
            } if started.elapsed() <= self.connect_timeout.saturating_add(STALE_CONNECT_GRACE) => {
                return Pending::Wait(connect.clone());
            }
            Slot::Ready(..) => {
                tracing::debug!(node = %self.name, "connection's runtime is gone; reconnecting");
            }
            Slot::Connecting { .. } => {
                tracing::debug!(node = %self.name, "connect never finished; connecting again");
            }
            Slot::Empty => {}
        }
        let (generation, connect) = self.start_connect();
        *slot = Slot::Connecting {
            generation,
            started: std::time::Instant::now(),
            connect: connect.clone(),
        };
        Pending::Wait(connect)
    }

    /// Starts connecting in a task of its own when a runtime is available, so that a
    /// request giving up after its (short) per-node timeout does not abort a connect that
    /// the next request wants to use. The task settles the slot when it ends; if it never
    /// ends (its runtime shut down), the first request to see that empties the slot.
    fn start_connect(self: &Arc<Self>) -> (u64, Shared<BoxFuture<'static, ConnectResult>>) {
        let node = Arc::clone(self);
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let connect = async move {
            let result = tokio::time::timeout(node.connect_timeout, async {
                let (client, master) = node.member.client(node.connect_timeout).await?;
                let mut conn =
                    crate::net::coalesce::connect(&client, &node.config, node.coalescing).await?;
                if master.is_some() {
                    require_master_role(&mut conn).await?;
                }
                preload_scripts(&mut conn).await?;
                let mut probe = conn.clone();
                let (facts, capabilities) =
                    futures::join!(node.learn_facts(&mut conn), learn_capabilities(&mut probe));
                facts?;
                *node.capabilities.lock().unwrap_or_else(|p| p.into_inner()) = capabilities?;
                if let Some(addr) = master {
                    node.member.connected_to(addr);
                }
                Ok::<_, RedisError>(conn)
            })
            .await;
            let result = match result {
                Ok(Ok(conn)) => Ok((generation, conn)),
                Ok(Err(e)) => Err(ConnectError::Failed(e.to_string())),
                Err(_) => Err(ConnectError::Failed(format!(
                    "connect timed out after {:?}",
                    node.connect_timeout
                ))),
            };
            node.settle_connect(generation, &result);
            result
        };
        let connect = match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let task = handle.spawn(connect);
                // Weak: the slot holds this future, which must not keep its node alive.
                let node = Arc::downgrade(self);
                async move {
                    task.await.unwrap_or_else(|e| {
                        if let Some(node) = node.upgrade() {
                            node.forget_connect(generation);
                        }
                        Err(ConnectError::Abandoned(format!("connect task ended: {e}")))
                    })
                }
                .boxed()
            }
            Err(_) => connect.boxed(),
        };
        (generation, connect.shared())
    }

    /// Puts the outcome of connect `generation` in the slot, unless a newer connect
    /// replaced it meanwhile.
    fn settle_connect(&self, generation: u64, result: &ConnectResult) {
        let mut slot = self.lock_slot();
        if !matches!(&*slot, Slot::Connecting { generation: g, .. } if *g == generation) {
            return;
        }
        *slot = match result {
            Ok((_, conn)) => Slot::Ready(generation, conn.clone(), Liveness::here()),
            Err(_) => Slot::Empty,
        };
    }

    /// Empties the slot if it still waits for connect `generation`, whose task is gone.
    fn forget_connect(&self, generation: u64) {
        let mut slot = self.lock_slot();
        if matches!(&*slot, Slot::Connecting { generation: g, .. } if *g == generation) {
            *slot = Slot::Empty;
        }
    }

    /// Forgets connection `generation` if it is still the current one: it is dead.
    ///
    /// A timeout alone does not discard a connection. The driver matches replies to
    /// requests in order and drops the reply of a request nobody waits for any more, so a
    /// late answer is never read as the answer to the next request. Keeping the connection
    /// also keeps a late `SET` ordered before the release that follows it on the same
    /// stream: a paused node applies both, in order, when it resumes, where a release sent
    /// on a fresh connection could overtake the `SET` and leave its key behind. A peer that
    /// is cut off stops acknowledging, and the TCP user timeout set by the builder then
    /// aborts the connection with an I/O error, which does discard it.
    fn discard(&self, generation: u64) {
        let mut slot = self.lock_slot();
        if matches!(&*slot, Slot::Ready(g, ..) if *g == generation) {
            *slot = Slot::Empty;
        }
    }

    /// Sends `call` on this node's connection, connecting first if needed. Unbounded: the
    /// caller bounds it (a round's deadline).
    ///
    /// A repeatable call that the connection refused before writing it (the connection
    /// broke under the client: the node restarted, the connection was killed, the driver's
    /// runtime is gone) is sent once more on a fresh connection, within the same bound.
    /// A call that may have been written is never sent again, and neither is one that may
    /// set a lock key.
    ///
    /// The request also runs what its membership needs to keep its vote confirmed (see
    /// [`Membership::renewal`](crate::net::member::Membership::renewal): a Sentinel
    /// member's sentinels, a Cluster shard's masters), and drops the connection once the
    /// confirmed master is another.
    pub(crate) async fn send(self: &Arc<Self>, call: &Call) -> Result<Value, NodeFailure> {
        let Some(renewal) = self.member.renewal(&self.name, self.connect_timeout) else {
            return self.send_here(call).await;
        };
        let (reply, current) = futures::join!(self.send_here(call), renewal);
        if !current {
            tracing::info!(node = %self.name, "the confirmed master is another; reconnecting");
            self.drop_connection();
        }
        reply
    }

    /// Drops the current connection, whatever its generation: the next request connects
    /// again.
    pub(crate) fn drop_connection(&self) {
        let mut slot = self.lock_slot();
        if matches!(&*slot, Slot::Ready(..)) {
            *slot = Slot::Empty;
        }
    }

    /// [`Node::send`] on the current connection.
    async fn send_here(self: &Arc<Self>, call: &Call) -> Result<Value, NodeFailure> {
        let mut retried = false;
        loop {
            let (generation, conn) = self.connection().await.map_err(NodeFailure::Failed)?;
            let acks = self.replica_acks.filter(|_| call.is_vote_write());
            let same_conn = acks.map(|_| conn.clone());
            let result = call.send_on(conn, self.capabilities()).await;
            match result {
                Ok(Some(reply)) => {
                    if let (Some(acks), Some(conn)) = (acks, same_conn) {
                        acks.confirm(conn).await?;
                    }
                    return Ok(reply);
                }
                Ok(None) => return Err(NodeFailure::Withdrawn),
                Err(SendError { error, unsent }) => {
                    let (failure, dead) = classify(&error);
                    let dead = self.member.noticed_failure(&error, dead) || dead;
                    if dead {
                        self.discard(generation);
                    }
                    if !(unsent && call.is_repeatable()) || std::mem::replace(&mut retried, true) {
                        return Err(failure);
                    }
                    tracing::debug!(node = %self.name, ?failure, "connection broken before sending; sending again on a new one");
                }
            }
        }
    }
}

/// Refuses a connection whose server is not a master (`ROLE`): the sentinels named a
/// replica that is still being promoted, or one that was demoted since.
async fn require_master_role(conn: &mut MultiplexedConnection) -> RedisResult<()> {
    let role: Vec<Value> = redis::cmd("ROLE").query_async(conn).await?;
    match role.first() {
        Some(Value::BulkString(r)) if r.as_slice() == b"master" => Ok(()),
        _ => Err(RedisError::from((
            redis::ErrorKind::Io,
            "the sentinels' master is not a master (yet)",
        ))),
    }
}

/// Loads every script on a new connection (one pipelined round trip), so `EVALSHA` finds
/// them even when its answer is never awaited. A refusal by the server (say, an ACL without
/// `SCRIPT`) is not fatal: a call answered with `NOSCRIPT` still loads its script and
/// retries (see [`Call`]).
async fn preload_scripts(conn: &mut MultiplexedConnection) -> RedisResult<()> {
    let mut pipe = redis::pipe();
    for source in protocol::every_source() {
        pipe.cmd("SCRIPT").arg("LOAD").arg(source);
    }
    match pipe.query_async::<Vec<String>>(conn).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_io_error() || e.is_connection_dropped() => Err(e),
        Err(e) => {
            tracing::debug!(error = %e, "script preload refused; relying on NOSCRIPT fallback");
            Ok(())
        }
    }
}
