//! One Redis node: a lazily made, shared, multiplexed connection and bounded requests.
//!
//! This module and the client's fan-out are the only places that touch the `redis` crate.

use std::future::Future;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, RedisResult, ToRedisArgs, Value};
use tokio::time::Instant;

use crate::ballot::{self, Read};
use crate::protocol::scripts::{self, Lua};
use crate::report::NodeOutcome;
use crate::safety::{Persistence, Uptime};

type ConnectResult = Result<(u64, MultiplexedConnection), String>;

/// How many requests the driver's channel to its connection task holds. The channel is
/// first come, first served only while it has room: a request that has to wait for room is
/// put in it when its future is next polled, possibly after a later request (a release)
/// that found room. Large enough never to fill (a node that stops reading holds at most
/// what is sent to it until the TCP user timeout drops its connection), so every request
/// is queued at its first poll, in poll order, which the release ordering relies on (see
/// [`SendGate`]). Slots are allocated as used, not up front.
const PIPELINE_BUFFER: usize = 1 << 20;

/// The connection state of a node.
enum Slot {
    /// No connection; the next request connects.
    Empty,
    /// A working connection, tagged with a generation so a request that saw it fail can
    /// discard exactly that one and not a newer replacement.
    Ready(u64, MultiplexedConnection),
    /// A connect in progress that every concurrent request waits on.
    Connecting(Shared<BoxFuture<'static, ConnectResult>>),
}

/// Why a request to a node produced no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeFailure {
    /// The key holds another type.
    WrongType,
    /// No answer in time.
    TimedOut,
    /// Connect or request error.
    Failed(String),
    /// Never sent: the token's release closed the request's gate first (see
    /// [`SendGate`]).
    Withdrawn,
}

impl NodeFailure {
    /// The `kind` label of the failure metric.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            NodeFailure::WrongType => "wrong_type",
            NodeFailure::TimedOut => "timeout",
            NodeFailure::Failed(_) => "error",
            NodeFailure::Withdrawn => "withdrawn",
        }
    }
}

impl From<NodeFailure> for NodeOutcome {
    fn from(f: NodeFailure) -> Self {
        match f {
            NodeFailure::WrongType => NodeOutcome::WrongType,
            NodeFailure::TimedOut => NodeOutcome::TimedOut,
            NodeFailure::Failed(m) => NodeOutcome::Failed(m),
            NodeFailure::Withdrawn => {
                NodeOutcome::Failed("not sent: the lock was released first".to_owned())
            }
        }
    }
}

/// A command sent unchanged to every node of a round, shared by their requests.
#[derive(Debug)]
pub(crate) struct Call {
    cmd: Cmd,
    /// For a script sent as `EVALSHA`: its source, loaded when a node answers `NOSCRIPT`.
    source: Option<&'static str>,
    /// For a command that may set a lock key: the gate its token's release closes.
    gate: Option<Arc<SendGate>>,
}

/// Orders the requests that may set a token's keys before that token's release, on every
/// node: each such request is written to its connection under the gate's lock, and the
/// release closes the gate before it sends anything.
///
/// Once closed, a request not yet written (waiting for a connection still opening, say) is
/// never sent: without the gate it could be written after the release's compare-and-delete
/// and leave its key for a whole TTL. A request written before is ahead of the release on
/// the same connection, whose commands the node applies in order.
#[derive(Debug)]
pub(crate) struct SendGate {
    open: std::sync::Mutex<bool>,
}

impl SendGate {
    pub(crate) fn new() -> Self {
        SendGate {
            open: std::sync::Mutex::new(true),
        }
    }

    /// No request through this gate is written from now on.
    pub(crate) fn close(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = false;
    }

    /// Runs `send` if the gate is open, its first poll under the gate's lock: that poll
    /// queues the command on the connection (the driver's channel is first come, first
    /// served, and the poll runs outside the task's cooperative budget, which could otherwise
    /// defer the queueing to a later poll). `None`: closed, nothing was sent.
    async fn pass<T>(gate: Option<&Self>, send: impl Future<Output = T>) -> Option<T> {
        let mut send = std::pin::pin!(tokio::task::coop::unconstrained(send));
        let mut first = gate;
        std::future::poll_fn(|cx| match first.take() {
            Some(gate) => {
                let open = gate.open.lock().unwrap_or_else(|p| p.into_inner());
                if !*open {
                    return Poll::Ready(None);
                }
                let polled = send.as_mut().poll(cx);
                drop(open);
                polled.map(Some)
            }
            None => send.as_mut().poll(cx).map(Some),
        })
        .await
    }
}

impl Call {
    /// A plain command.
    pub(crate) fn new(cmd: Cmd) -> Self {
        Call {
            cmd,
            source: None,
            gate: None,
        }
    }

    /// `EVALSHA` of `lua` for the lock keys `locks` (the script gets them and the keys
    /// derived from them, in its layout); add its arguments with [`Call::arg`].
    pub(crate) fn script(lua: &'static Lua, locks: &[String]) -> Self {
        let keys: Vec<String> = lua.keys(locks).collect();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(lua.hash()).arg(keys.len());
        for key in keys {
            cmd.arg(key);
        }
        Call {
            cmd,
            source: Some(lua.source),
            gate: None,
        }
    }

    /// Sends this call only while `gate` is open (see [`SendGate`]).
    pub(crate) fn gated(mut self, gate: &Arc<SendGate>) -> Self {
        self.gate = Some(Arc::clone(gate));
        self
    }

    /// Appends an argument.
    pub(crate) fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        self.cmd.arg(arg);
        self
    }

    /// Sends the command; `None` when its gate closed before it was written.
    async fn run(&self, conn: &mut MultiplexedConnection) -> RedisResult<Option<Value>> {
        let gate = self.gate.as_deref();
        let Some(reply) = SendGate::pass(gate, conn.send_packed_command(&self.cmd)).await else {
            return Ok(None);
        };
        match reply? {
            // A node that lost its scripts (`SCRIPT FLUSH`, a restart between our preload
            // and this call): load the source and try once more.
            Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript) => {
                let Some(source) = self.source else {
                    return Err(e.into());
                };
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(source)
                    .query_async::<()>(conn)
                    .await?;
                // The second try passes the gate again: a release may have closed it.
                match SendGate::pass(gate, conn.send_packed_command(&self.cmd)).await {
                    Some(reply) => server_error(reply?).map(Some),
                    None => Ok(None),
                }
            }
            reply => server_error(reply).map(Some),
        }
    }
}

/// An error reply as an error (the driver hands them over as values).
fn server_error(reply: Value) -> RedisResult<Value> {
    match reply {
        Value::ServerError(e) => Err(e.into()),
        reply => Ok(reply),
    }
}

pub(crate) struct Node {
    /// `host:port`, without credentials.
    name: String,
    client: Client,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
    slot: Mutex<Slot>,
    generation: AtomicU64,
    /// What the client knows of the server behind the current connection, learnt on every
    /// (re)connect (see [`Facts`]).
    facts: Mutex<Option<Facts>>,
    /// The quarantine state last published as a gauge: 0 none yet, 1 counting, 2
    /// quarantined.
    published: AtomicU8,
}

/// What a connect learnt about the Redis process behind a node, for restart quarantine
/// (safety v2): its identity and age from `INFO`, its durability, and what this client has
/// since seen of the node's admission in that life.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    /// `run_id`: one per process, so a new one means a restart. `None` when `INFO` was
    /// refused or lacks it: the node then does not vote.
    pub(crate) run_id: Option<Arc<str>>,
    /// `uptime_in_seconds` from the same reply.
    pub(crate) uptime: Option<Uptime>,
    /// When that reply arrived (the uptime was measured before).
    pub(crate) at: Instant,
    /// Whether acknowledged writes survive a restart (`aof_enabled`, `appendfsync`).
    pub(crate) persistence: Persistence,
    /// Why `INFO` gave no identity (say, an ACL user without `+info`).
    pub(crate) refused: Option<String>,
    /// This client saw the node's marker name this life (the node votes without asking
    /// the ensemble), with the completeness it says. Lets an acquisition send a plain
    /// `SET NX PX`, with [`Facts::record_ms`].
    pub(crate) admitted: Option<bool>,
    /// The ensemble record is known to be at least this on the node in this life
    /// (milliseconds; 0: not known).
    pub(crate) record_ms: u64,
}

impl Facts {
    /// Reads `INFO` (every default section: `server` and `persistence` are needed) and, only
    /// with AOF on, `CONFIG GET appendfsync`. A refused `INFO` leaves the identity unknown,
    /// a refused `CONFIG` the persistence: both fall to the safe side (see
    /// [`safety::admit`](crate::safety::admit)). Only I/O errors fail.
    async fn learn(conn: &mut MultiplexedConnection) -> RedisResult<Facts> {
        let text = match redis::cmd("INFO").query_async::<String>(conn).await {
            Ok(text) => text,
            Err(e) if e.is_io_error() || e.is_connection_dropped() => return Err(e),
            Err(e) => {
                return Ok(Facts {
                    run_id: None,
                    uptime: None,
                    at: Instant::now(),
                    persistence: Persistence::Unknown,
                    refused: Some(format!("info refused: {e}")),
                    admitted: None,
                    record_ms: 0,
                });
            }
        };
        let at = Instant::now();
        let info = crate::info::parse(&text);
        let persistence = match info.aof_enabled() {
            Some(false) => Persistence::Volatile,
            None => Persistence::Unknown,
            Some(true) => match redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendfsync")
                .query_async::<Vec<String>>(conn)
                .await
            {
                Ok(pair) if pair.get(1).is_some_and(|v| v == "always") => Persistence::AofAlways,
                Ok(pair) if pair.len() == 2 => Persistence::Volatile,
                Ok(_) => Persistence::Unknown,
                Err(e) if e.is_io_error() || e.is_connection_dropped() => return Err(e),
                Err(_) => Persistence::Unknown,
            },
        };
        let run_id = info.run_id().map(Arc::from);
        let uptime = info
            .get("uptime_in_seconds")
            .and_then(|v| v.parse().ok())
            .map(Uptime::seconds);
        let refused = (run_id.is_none() || uptime.is_none())
            .then(|| "info gave no run_id or uptime_in_seconds".to_owned());
        Ok(Facts {
            run_id,
            uptime,
            at,
            persistence,
            refused,
            admitted: None,
            record_ms: 0,
        })
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("name", &self.name).finish()
    }
}

impl Node {
    pub(crate) fn new(name: String, client: Client, connect_timeout: Duration) -> Self {
        // Both timeouts are set explicitly so the driver's defaults never apply by accident.
        // No response timeout in the driver: every request is bounded by its round's
        // deadline (one timer for all nodes of a round) or by `Node::run`, and a second
        // timer per request would only cost.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None)
            .set_pipeline_buffer_size(PIPELINE_BUFFER);
        Node {
            name,
            client,
            config,
            connect_timeout,
            slot: Mutex::new(Slot::Empty),
            generation: AtomicU64::new(0),
            facts: Mutex::new(None),
            published: AtomicU8::new(0),
        }
    }

    /// Learns the facts of the server behind a new connection (see [`Facts::learn`]); a new
    /// `run_id` is logged and counted as a restart.
    async fn learn_facts(&self, conn: &mut MultiplexedConnection) -> RedisResult<()> {
        let facts = Facts::learn(conn).await?;
        if let Some(why) = &facts.refused {
            tracing::warn!(node = %self.name, %why, "node cannot vote: its identity is unknown");
        }
        let mut known = self.lock_facts();
        let old = known.as_ref().and_then(|f| f.run_id.clone());
        if let (Some(old), Some(new)) = (&old, &facts.run_id)
            && old != new
        {
            tracing::info!(node = %self.name, "node restarted (new run_id)");
            crate::metrics::node_restarted(&self.name);
        }
        // The same process reached again (a reconnect): what this client saw of its
        // admission and record still holds.
        let (admitted, record_ms) = known
            .as_ref()
            .filter(|f| f.run_id.is_some() && f.run_id == facts.run_id)
            .map_or((None, 0), |f| (f.admitted, f.record_ms));
        *known = Some(Facts {
            admitted,
            record_ms,
            ..facts
        });
        Ok(())
    }

    fn lock_facts(&self) -> MutexGuard<'_, Option<Facts>> {
        self.facts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The facts learnt on the last connect; `None` before the first one.
    pub(crate) fn facts(&self) -> Option<Facts> {
        self.lock_facts().clone()
    }

    /// What the ballot of an acquisition knows of this node before its reply: its
    /// `run_id`, its age now (rounded down) and its durability.
    pub(crate) fn blank_read(&self) -> Read {
        let known = self.lock_facts();
        let Some(facts) = known.as_ref() else {
            return Read::blank(None, None, Persistence::Unknown);
        };
        let uptime = facts.uptime.map(|u| ballot::aged(u, facts.at.elapsed()));
        Read::blank(facts.run_id.clone(), uptime, facts.persistence)
    }

    /// The node's `run_id`, when known.
    pub(crate) fn run_id(&self) -> Option<Arc<str>> {
        self.lock_facts().as_ref().and_then(|f| f.run_id.clone())
    }

    /// The life (`run_id`) in which this node may take a plain `SET NX PX` for `ttl_ms`, and
    /// the completeness its marker said (`false` when not `admitted`): its ensemble record
    /// is known to cover `ttl_ms` in its current life and, when `admitted` is asked for, it
    /// was seen admitted in that life.
    pub(crate) fn fast_path(&self, ttl_ms: u64, admitted: bool) -> Option<(Arc<str>, bool)> {
        let known = self.lock_facts();
        let facts = known.as_ref()?;
        if facts.record_ms < ttl_ms || (admitted && facts.admitted.is_none()) {
            return None;
        }
        Some((facts.run_id.clone()?, facts.admitted.unwrap_or(false)))
    }

    /// Records what this client saw in the node's life `life` (ignored when that is no
    /// longer its current life): its ensemble record is at least `record_ms`, and, with
    /// `complete`, its marker names that life with that completeness.
    pub(crate) fn seen(&self, life: &str, complete: Option<bool>, record_ms: u64) {
        let mut known = self.lock_facts();
        if let Some(facts) = known.as_mut()
            && facts.run_id.as_deref() == Some(life)
        {
            facts.record_ms = facts.record_ms.max(record_ms);
            if complete.is_some() {
                facts.admitted = complete;
            }
        }
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

    /// The driver client (for one-off connections, e.g. diagnostics).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn lock_slot(&self) -> MutexGuard<'_, Slot> {
        // The slot is only ever replaced whole, so a poisoned lock still holds a valid state.
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current connection, connecting first if there is none.
    async fn connection(self: &Arc<Self>) -> ConnectResult {
        let pending = {
            let mut slot = self.lock_slot();
            match &*slot {
                Slot::Ready(generation, conn) => return Ok((*generation, conn.clone())),
                Slot::Connecting(fut) => fut.clone(),
                Slot::Empty => {
                    let fut = self.start_connect();
                    *slot = Slot::Connecting(fut.clone());
                    fut
                }
            }
        };
        pending.await
    }

    /// Starts connecting in a task of its own when a runtime is available, so that a
    /// request giving up after its (short) per-node timeout does not abort a connect that
    /// the next request wants to use.
    fn start_connect(self: &Arc<Self>) -> Shared<BoxFuture<'static, ConnectResult>> {
        let node = Arc::clone(self);
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let connect = async move {
            let result = tokio::time::timeout(node.connect_timeout, async {
                let mut conn = node
                    .client
                    .get_multiplexed_async_connection_with_config(&node.config)
                    .await?;
                preload_scripts(&mut conn).await?;
                node.learn_facts(&mut conn).await?;
                Ok::<_, RedisError>(conn)
            })
            .await;
            let mut slot = node.lock_slot();
            match result {
                Ok(Ok(conn)) => {
                    *slot = Slot::Ready(generation, conn.clone());
                    Ok((generation, conn))
                }
                Ok(Err(e)) => {
                    *slot = Slot::Empty;
                    Err(e.to_string())
                }
                Err(_) => {
                    *slot = Slot::Empty;
                    Err(format!(
                        "connect timed out after {:?}",
                        node.connect_timeout
                    ))
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let task = handle.spawn(connect);
                async move {
                    task.await
                        .unwrap_or_else(|e| Err(format!("connect task ended: {e}")))
                }
                .boxed()
                .shared()
            }
            Err(_) => connect.boxed().shared(),
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

    /// Runs `op` on this node's connection, connecting first if needed. Unbounded: the
    /// caller bounds it (a round's deadline, or [`Node::run`]).
    pub(crate) async fn request<T, F, Fut>(self: &Arc<Self>, op: F) -> Result<T, NodeFailure>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (generation, conn) = self.connection().await.map_err(NodeFailure::Failed)?;
        op(conn).await.map_err(|e| self.classify(generation, e))
    }

    /// Sends `call` on this node's connection, connecting first if needed. Unbounded: the
    /// caller bounds it (a round's deadline).
    pub(crate) async fn send(self: &Arc<Self>, call: &Call) -> Result<Value, NodeFailure> {
        self.request(|mut conn| async move { call.run(&mut conn).await })
            .await
            .and_then(|sent| sent.ok_or(NodeFailure::Withdrawn))
    }

    fn classify(&self, generation: u64, e: RedisError) -> NodeFailure {
        if e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE") {
            return NodeFailure::WrongType;
        }
        if e.is_timeout() {
            // A timeout reported by the driver (its response timeout is off on our own
            // connections): the connection stays (see `discard`).
            return NodeFailure::TimedOut;
        }
        if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
            self.discard(generation);
        }
        NodeFailure::Failed(e.to_string())
    }
}

/// Loads every script on a new connection (one pipelined round trip), so `EVALSHA` finds
/// them even when its answer is never awaited. A refusal by the server (say, an ACL without
/// `SCRIPT`) is not fatal: a call answered with `NOSCRIPT` still loads its script and
/// retries (see [`Call`]).
async fn preload_scripts(conn: &mut MultiplexedConnection) -> RedisResult<()> {
    let mut pipe = redis::pipe();
    for source in scripts::SOURCES {
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
