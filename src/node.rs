//! One Redis node: a lazily made, shared, multiplexed connection and bounded requests.
//!
//! This module and the client's fan-out are the only places that touch the `redis` crate.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, RedisResult, ToRedisArgs, Value};
use tokio::time::Instant;

use crate::protocol::scripts::{self, Lua};
use crate::report::NodeOutcome;

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
    /// The server instance behind the current connection, learnt on every (re)connect.
    identity: Mutex<Option<Identity>>,
    /// The quarantine state last published as a gauge: 0 none yet, 1 counting, 2
    /// quarantined.
    published: AtomicU8,
    /// Set by the client's shutdown: the connection is dropped and never made again.
    closed: AtomicBool,
}

/// Which Redis process a node is, and since when it runs.
#[derive(Debug)]
pub(crate) struct Identity {
    pub(crate) run_id: String,
    /// When the process started, on our monotonic clock (rounded towards later: uptime is
    /// reported in whole seconds, so the estimate errs on the quarantining side).
    pub(crate) started: Instant,
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
            identity: Mutex::new(None),
            published: AtomicU8::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// Reads `run_id` and uptime from `INFO server`. A refusal (say, an ACL without
    /// `INFO`) leaves the identity unknown, which disables quarantine for this node.
    async fn learn_identity(&self, conn: &mut MultiplexedConnection) -> RedisResult<()> {
        let asked = Instant::now();
        let info = match redis::cmd("INFO")
            .arg("server")
            .query_async::<String>(conn)
            .await
        {
            Ok(info) => info,
            Err(e) if e.is_io_error() || e.is_connection_dropped() => return Err(e),
            Err(_) => return Ok(()),
        };
        let info = crate::info::parse(&info);
        let identity = match (info.run_id(), info.uptime()) {
            (Some(run_id), Some(uptime)) => Some(Identity {
                run_id: run_id.to_owned(),
                started: asked.checked_sub(uptime).unwrap_or(asked),
            }),
            _ => None,
        };
        let mut known = self.identity.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(old), Some(new)) = (&*known, &identity)
            && old.run_id != new.run_id
        {
            tracing::info!(node = %self.name, "node restarted (new run_id)");
            crate::metrics::node_restarted(&self.name);
        }
        *known = identity;
        Ok(())
    }

    /// Whether this node's vote must not count yet: it (re)started less than `period` ago,
    /// so it may have lost locks granted before. Unknown identity: not quarantined.
    pub(crate) fn is_quarantined(&self, period: Duration) -> bool {
        let known = self.identity.lock().unwrap_or_else(|p| p.into_inner());
        known
            .as_ref()
            .is_some_and(|id| id.started.elapsed() < period)
    }

    /// [`is_quarantined`](Self::is_quarantined) for a yes vote, with its metrics: every
    /// vote not counted, and the node's quarantine gauge when its state changed.
    pub(crate) fn quarantined_vote(&self, period: Duration) -> bool {
        let quarantined = self.is_quarantined(period);
        if quarantined {
            crate::metrics::vote_quarantined(&self.name);
        }
        let state = if quarantined { 2 } else { 1 };
        if self.published.swap(state, Ordering::Relaxed) != state {
            crate::metrics::node_quarantined(&self.name, quarantined);
        }
        quarantined
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
    /// Drops the connection (its driver ends once no request uses it) and makes no new one:
    /// every later request fails at once (client shutdown).
    pub(crate) fn close(&self) {
        let mut slot = self.lock_slot();
        self.closed.store(true, Ordering::Release);
        *slot = Slot::Empty;
    }

    async fn connection(self: &Arc<Self>) -> ConnectResult {
        let pending = {
            let mut slot = self.lock_slot();
            if self.closed.load(Ordering::Acquire) {
                return Err("the client was shut down".into());
            }
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
                node.learn_identity(&mut conn).await?;
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
