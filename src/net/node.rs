//! One Redis node: a lazily made, shared, multiplexed connection and bounded requests.
//!
//! This module and the client's fan-out are the only places that touch the `redis` crate.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, RedisResult, ToRedisArgs, Value};
use tokio::task::coop::Unconstrained;
use tokio::time::Instant;

use crate::acquire::ballot::{self, Read};
use crate::net::coalesce::Yield;
use crate::protocol::native::{Capabilities, Native};
use crate::protocol::scripts::{self, Lua};
use crate::report::NodeOutcome;
use crate::rules::safety::{Persistence, Uptime};

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
/// [`SendGate`]). Slots are allocated as used, not up front.
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
    /// The server's ACL refused the command, a key or a channel; the message is the
    /// server's.
    Denied(String),
}

impl NodeFailure {
    /// The `kind` label of the failure metric.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            NodeFailure::WrongType => "wrong_type",
            NodeFailure::TimedOut => "timeout",
            NodeFailure::Failed(_) => "error",
            NodeFailure::Withdrawn => "withdrawn",
            NodeFailure::Denied(_) => "permission",
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
            NodeFailure::Denied(m) => NodeOutcome::PermissionDenied(m),
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
    /// A native command with the same effect, sent instead to nodes that have it.
    native: Option<Native>,
    /// Sent once more, on a fresh connection, when the connection refused it before it was
    /// written (see [`Node::send`]). Only for commands whose second run changes nothing the
    /// first did not; never for one that may set a lock key.
    repeatable: bool,
    /// Must reach its node even when nobody waits for its answer any more (see
    /// [`Delivery`]): a release.
    delivered: bool,
}

/// A failed send, and whether the command provably never reached the server.
struct SendError {
    error: RedisError,
    /// The connection refused the command at its first poll with a connection error: the
    /// driver had already stopped (its channel closed, or its socket known broken), so
    /// nothing was written. A failure after that first poll proves nothing: the command
    /// may have been written, and applied, before the connection broke.
    unsent: bool,
}

impl From<RedisError> for SendError {
    fn from(error: RedisError) -> Self {
        SendError {
            error,
            unsent: false,
        }
    }
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
    /// defer the queueing to a later poll). `None`: closed, nothing was sent. Otherwise the
    /// output, and whether it came at the first poll.
    ///
    /// `send` is pinned by the caller: taken by value, it would be stored twice in this
    /// future (the argument and its pinned copy), and copied twice on every send.
    async fn pass<F: Future>(
        gate: Option<&Self>,
        mut send: Pin<&mut Unconstrained<F>>,
    ) -> Option<(F::Output, bool)> {
        let mut first = true;
        std::future::poll_fn(|cx| {
            let at_first = std::mem::take(&mut first);
            let open = match gate.filter(|_| at_first) {
                Some(gate) => {
                    let open = gate.open.lock().unwrap_or_else(|p| p.into_inner());
                    if !*open {
                        return Poll::Ready(None);
                    }
                    Some(open)
                }
                None => None,
            };
            let polled = send.as_mut().poll(cx);
            drop(open);
            polled.map(|out| Some((out, at_first)))
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
            repeatable: false,
            native: None,
            delivered: false,
        }
    }

    /// Marks a plain command as safe to send twice (a read, an idempotent delete): see
    /// [`Node::send`].
    pub(crate) fn repeatable(mut self) -> Self {
        self.repeatable = self.gate.is_none();
        self
    }

    /// `EVALSHA` of `lua` for the lock keys `locks` under key prefix `prefix` (the script
    /// gets them and the keys derived from them, in its layout); add its arguments with
    /// [`Call::arg`].
    pub(crate) fn script(lua: &'static Lua, prefix: &str, locks: &[String]) -> Self {
        // Sized once for the name, digest, key count, keys and the usual arguments (a
        // token, a TTL, a few flags), instead of growing with every argument; the keys are
        // written into the command from their parts (see `keys::Name`).
        let keys = lua.keys(prefix, locks);
        let (count, key_bytes) = (keys.clone()).fold((0, 0), |(n, b), k| (n + 1, b + k.len()));
        let mut cmd = Cmd::with_capacity(count + 10, key_bytes + 128);
        cmd.arg("EVALSHA").arg(lua.hash()).arg(count);
        for key in keys {
            cmd.arg(key);
        }
        Call {
            cmd,
            source: Some(lua.source),
            gate: None,
            repeatable: lua.is_repeatable(),
            native: None,
            delivered: false,
        }
    }

    /// Sends this call only while `gate` is open (see [`SendGate`]). A gated call is never
    /// repeated: it may set a lock key.
    pub(crate) fn gated(mut self, gate: &Arc<SendGate>) -> Self {
        self.gate = Some(Arc::clone(gate));
        self.repeatable = false;
        self
    }

    /// Sends `native` instead on the nodes that have the capability it needs (learnt at
    /// connect); the others get this call. The caller vouches that both have the same
    /// effect (see [`native`](crate::protocol::native) for where that holds). Add every
    /// argument of the script before.
    pub(crate) fn or_native(mut self, native: Native) -> Self {
        self.native = Some(native);
        self
    }

    /// Marks a call that must reach its node even if its request is given up before the
    /// answer (see [`Delivery`]): for commands whose second run changes nothing the first
    /// did not (a compare-and-delete), never for one that may set a lock key.
    pub(crate) fn delivered(mut self) -> Self {
        self.delivered = self.gate.is_none();
        self
    }

    /// The native stand-in a node with `capabilities` gets, if any (see
    /// [`or_native`](Self::or_native)).
    fn native_for(&self, capabilities: Capabilities) -> Option<&Native> {
        self.native.as_ref().filter(|n| capabilities.has(n.needs))
    }

    /// The command [`run`](Self::run) sends first to a node with `capabilities`, as a copy
    /// that the driver writes without waiting for a reply.
    fn unanswered(&self, capabilities: Capabilities) -> Cmd {
        let cmd = match self.native_for(capabilities) {
            Some(native) => &native.cmd,
            None => &self.cmd,
        };
        let mut cmd = cmd.clone();
        cmd.set_no_response(true);
        cmd
    }

    /// Appends an argument.
    pub(crate) fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        self.cmd.arg(arg);
        self
    }

    /// Sends the command, or its native stand-in where `capabilities` allow; `None` when its
    /// gate closed before it was written. Either is written in one poll under the same gate,
    /// so a release orders the same way whichever path a node takes.
    async fn run(
        &self,
        conn: &mut MultiplexedConnection,
        capabilities: Capabilities,
    ) -> Result<Option<Value>, SendError> {
        let gate = self.gate.as_deref();
        if let Some(native) = self.native_for(capabilities) {
            let Some(reply) = send_on(gate, conn, &native.cmd).await? else {
                return Ok(None);
            };
            match reply {
                // An ACL that allows the script but not this command: the command did
                // nothing, so the script below has the effect it would have had.
                Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoPerm) => {
                    tracing::debug!(error = %e, "native command refused; sending the script");
                }
                reply => return Ok(Some(native.reply(server_error(reply)?))),
            }
        }
        let Some(reply) = send_on(gate, conn, &self.cmd).await? else {
            return Ok(None);
        };
        match reply {
            // A node that lost its scripts (`SCRIPT FLUSH`, a restart between our preload
            // and this call): load the source and try once more.
            Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript) => {
                let Some(source) = self.source else {
                    return Err(RedisError::from(e).into());
                };
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(source)
                    .query_async::<()>(conn)
                    .await?;
                // The second try passes the gate again: a release may have closed it.
                match send_on(gate, conn, &self.cmd).await? {
                    Some(reply) => Ok(Some(server_error(reply)?)),
                    None => Ok(None),
                }
            }
            reply => Ok(Some(server_error(reply)?)),
        }
    }
}

/// One send of `cmd` through `gate`; a connection error at the first poll is marked unsent
/// (see [`SendError`]).
async fn send_on(
    gate: Option<&SendGate>,
    conn: &mut MultiplexedConnection,
    cmd: &Cmd,
) -> Result<Option<Value>, SendError> {
    let send = std::pin::pin!(tokio::task::coop::unconstrained(
        conn.send_packed_command(cmd)
    ));
    match SendGate::pass(gate, send).await {
        None => Ok(None),
        Some((Ok(reply), _)) => Ok(Some(reply)),
        Some((Err(error), at_first)) => {
            let unsent = at_first && (error.is_io_error() || error.is_connection_dropped());
            Err(SendError { error, unsent })
        }
    }
}

/// A request of a [`Call::delivered`] call on a connection, until its answer comes.
///
/// The driver does not write a request whose caller has gone: one given up before the
/// driver's task got to it (its deadline passed at once, a node timeout of a few
/// microseconds; or its caller was dropped) is never sent. For a release that would leave
/// a key behind for its whole TTL where the `SET` it undoes was written. Dropped while
/// armed, this queues a copy of the command that the driver writes without waiting for a
/// reply. Should the first one have been written after all, the copy runs after it on the
/// same connection and finds nothing left to do (the calls marked are compare-and-delete
/// and idempotent list updates).
struct Delivery<'a> {
    conn: MultiplexedConnection,
    /// The call, while its answer has not come.
    armed: Option<&'a Call>,
    capabilities: Capabilities,
}

impl Drop for Delivery<'_> {
    fn drop(&mut self) {
        let Some(call) = self.armed.take() else {
            return;
        };
        let cmd = call.unanswered(self.capabilities);
        // Queued on the driver's channel at the first poll when it has room (it always has
        // but for thousands of requests in flight); otherwise by a task, if a runtime is
        // there.
        let queued = {
            let send = tokio::task::coop::unconstrained(self.conn.send_packed_command(&cmd));
            futures::FutureExt::now_or_never(send).is_some()
        };
        if !queued && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let mut conn = self.conn.clone();
            runtime.spawn(async move {
                let _ = conn.send_packed_command(&cmd).await;
            });
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
    /// How the connection's writes yield to let other tasks' requests share them.
    coalescing: Yield,
    slot: Mutex<Slot>,
    generation: AtomicU64,
    /// What the client knows of the server behind the current connection, learnt on every
    /// (re)connect (see [`Facts`]).
    facts: Mutex<Option<Facts>>,
    /// The native commands of the server behind the current connection, learnt on every
    /// (re)connect (none until then: the scripts work everywhere).
    capabilities: Mutex<Capabilities>,
    /// The quarantine state last published as a gauge: 0 none yet, 1 counting, 2
    /// quarantined.
    published: AtomicU8,
    /// Set by the client's shutdown: the connection is dropped and never made again.
    closed: AtomicBool,
    /// An acquire script's answer that came after its attempt's decision is being read (see
    /// `attempt::read_late_records`): at most one such reader per node.
    reading_late: AtomicBool,
    /// Told the node's name and durability every time a connect learnt its facts.
    on_facts: OnceLock<FactsHook>,
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

/// What the ensemble wants to hear when a node's connect learnt its facts: its name and
/// durability (see [`Node::on_facts`]).
pub(crate) type FactsHook = Arc<dyn Fn(&str, Persistence) + Send + Sync>;

/// `uptime_in_seconds` as Redis reports it. Redis computes it from wall-clock readings, so
/// after a backward clock step it is negative: that reads as 0, the lower bound (the age
/// restart quarantine needs is rounded against the node), rather than as no identity at all,
/// which would keep even an intact node from voting for the connection's life.
fn parse_uptime(text: &str) -> Option<Uptime> {
    let seconds: i64 = text.trim().parse().ok()?;
    Some(Uptime::seconds(u64::try_from(seconds).unwrap_or(0)))
}

/// What a connect learnt about the Redis process behind a node, for restart quarantine:
/// its identity and age from `INFO`, its durability, and what this client has
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
    /// the ensemble). Lets an acquisition send a plain `SET NX PX`, with
    /// [`Facts::record_ms`].
    pub(crate) admitted: bool,
    /// The ensemble record is known to be at least this on the node in this life
    /// (milliseconds; 0: not known).
    pub(crate) record_ms: u64,
    /// The server's kind and version (`"valkey 9.1.2"`), from the same `INFO`.
    pub(crate) server: Option<String>,
}

impl Facts {
    /// Reads `INFO` (every default section: `server` and `persistence` are needed) and, only
    /// with AOF on, `CONFIG GET appendfsync`. A refused `INFO` leaves the identity unknown,
    /// a refused `CONFIG` the persistence: both fall to the safe side (see
    /// [`safety::admit`](crate::rules::safety::admit)). Only I/O errors fail.
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
                    admitted: false,
                    record_ms: 0,
                    server: None,
                });
            }
        };
        let at = Instant::now();
        let info = crate::protocol::info::parse(&text);
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
        let uptime = info.get("uptime_in_seconds").and_then(parse_uptime);
        let refused = (run_id.is_none() || uptime.is_none())
            .then(|| "info gave no run_id or uptime_in_seconds".to_owned());
        let server = info.server().map(|s| format!("{} {}", s.kind, s.version));
        Ok(Facts {
            run_id,
            uptime,
            at,
            persistence,
            refused,
            admitted: false,
            record_ms: 0,
            server,
        })
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
        client: Client,
        connect_timeout: Duration,
        coalescing: Yield,
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
            client,
            config,
            connect_timeout,
            coalescing,
            slot: Mutex::new(Slot::Empty),
            generation: AtomicU64::new(0),
            facts: Mutex::new(None),
            capabilities: Mutex::new(Capabilities::default()),
            published: AtomicU8::new(0),
            closed: AtomicBool::new(false),
            reading_late: AtomicBool::new(false),
            on_facts: OnceLock::new(),
        }
    }

    /// Calls `hook` with the node's name and durability after every connect that learnt
    /// its facts (the first hook set stays).
    pub(crate) fn on_facts(&self, hook: FactsHook) {
        let _ = self.on_facts.set(hook);
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
            .map_or((false, 0), |f| (f.admitted, f.record_ms));
        let persistence = facts.persistence;
        *known = Some(Facts {
            admitted,
            record_ms,
            ..facts
        });
        drop(known);
        if let Some(hook) = self.on_facts.get() {
            hook(&self.name, persistence);
        }
        Ok(())
    }

    /// The server's kind and version as last learnt (`"valkey 9.1.2"`); `None` before the
    /// first connect or when `INFO` was refused.
    pub(crate) fn server(&self) -> Option<String> {
        self.lock_facts().as_ref().and_then(|f| f.server.clone())
    }

    /// Asks which native commands the server has (see [`Capabilities`]), both probes in
    /// one round trip; a refused probe means "not there".
    async fn learn_capabilities(&self, conn: &mut MultiplexedConnection) -> RedisResult<()> {
        let [info, docs] = Capabilities::probes();
        let (mut c1, mut c2) = (conn.clone(), conn.clone());
        let (info, docs) = futures::join!(
            info.query_async::<Value>(&mut c1),
            docs.query_async::<Value>(&mut c2)
        );
        for reply in [&info, &docs] {
            if let Err(e) = reply
                && (e.is_io_error() || e.is_connection_dropped())
            {
                return Err(e.clone());
            }
        }
        let capabilities = Capabilities::from_probes(info.as_ref().ok(), docs.as_ref().ok());
        *self.capabilities.lock().unwrap_or_else(|p| p.into_inner()) = capabilities;
        Ok(())
    }

    /// The native commands of the server behind the current connection.
    pub(crate) fn capabilities(&self) -> Capabilities {
        *self.capabilities.lock().unwrap_or_else(|p| p.into_inner())
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

    /// The life (`run_id`) in which this node may take a plain `SET NX PX` for `ttl_ms`: its
    /// ensemble record is known to cover `ttl_ms` in its current life and, when `admitted`
    /// is asked for, it was seen admitted in that life.
    pub(crate) fn fast_path(&self, ttl_ms: u64, admitted: bool) -> Option<Arc<str>> {
        let known = self.lock_facts();
        let facts = known.as_ref()?;
        if facts.record_ms < ttl_ms || (admitted && !facts.admitted) {
            return None;
        }
        facts.run_id.clone()
    }

    /// Whether this client knows the node admitted in its current life (its marker named
    /// that life in an answer since the last connect learnt it).
    pub(crate) fn is_admitted(&self) -> bool {
        self.lock_facts().as_ref().is_some_and(|f| f.admitted)
    }

    /// Claims the one reader of this node's late acquire answers (see
    /// `attempt::read_late_records`); `None` when one reads already. The claim is given back
    /// when the returned [`ReadingLate`] is dropped (the reader ended, or a stopped client's
    /// collector dropped it).
    pub(crate) fn claim_reading_late(self: &Arc<Self>) -> Option<ReadingLate> {
        let free = !self.reading_late.swap(true, Ordering::AcqRel);
        free.then(|| ReadingLate(Arc::clone(self)))
    }

    /// Records what this client saw in the node's life `life` (ignored when that is no
    /// longer its current life): its ensemble record is at least `record_ms`, and, when
    /// `admitted`, its marker names that life.
    pub(crate) fn seen(&self, life: &str, admitted: bool, record_ms: u64) {
        let mut known = self.lock_facts();
        if let Some(facts) = known.as_mut()
            && facts.run_id.as_deref() == Some(life)
        {
            facts.record_ms = facts.record_ms.max(record_ms);
            facts.admitted |= admitted;
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
                let mut conn =
                    crate::net::coalesce::connect(&node.client, &node.config, node.coalescing)
                        .await?;
                preload_scripts(&mut conn).await?;
                let mut probe = conn.clone();
                let (facts, capabilities) = futures::join!(
                    node.learn_facts(&mut conn),
                    node.learn_capabilities(&mut probe)
                );
                facts?;
                capabilities?;
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
    pub(crate) async fn send(self: &Arc<Self>, call: &Call) -> Result<Value, NodeFailure> {
        let mut retried = false;
        loop {
            let (generation, conn) = self.connection().await.map_err(NodeFailure::Failed)?;
            let capabilities = self.capabilities();
            let mut delivery = Delivery {
                conn,
                armed: call.delivered.then_some(call),
                capabilities,
            };
            let result = call.run(&mut delivery.conn, capabilities).await;
            delivery.armed = None;
            match result {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => return Err(NodeFailure::Withdrawn),
                Err(SendError { error, unsent }) => {
                    let failure = self.classify(generation, error);
                    if !(unsent && call.repeatable) || std::mem::replace(&mut retried, true) {
                        return Err(failure);
                    }
                    tracing::debug!(node = %self.name, ?failure, "connection broken before sending; sending again on a new one");
                }
            }
        }
    }

    fn classify(&self, generation: u64, e: RedisError) -> NodeFailure {
        if e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE") {
            return NodeFailure::WrongType;
        }
        if is_permission_error(e.code(), &e.to_string()) {
            return NodeFailure::Denied(e.to_string());
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

/// Whether a server error (its code and message) is an ACL refusal: `NOPERM` for a command,
/// key or channel the user may not use, or, for a command a script ran, the plain `ERR`
/// with which the servers report it (Redis 6.2 and 7.0: "The user executing the script
/// can't ...", Redis 7.2 and later, Valkey: "ACL failure in script").
fn is_permission_error(code: Option<&str>, message: &str) -> bool {
    code == Some("NOPERM")
        || message.starts_with("NOPERM")
        || message.contains("The user executing the script can't")
        || message.contains("ACL failure in script")
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_negative_uptime_reads_as_zero_not_as_no_identity() {
        assert_eq!(parse_uptime("42"), Some(Uptime::seconds(42)));
        assert_eq!(parse_uptime("-3"), Some(Uptime::seconds(0)));
        assert_eq!(parse_uptime("x"), None);
    }

    use super::*;

    #[test]
    fn acl_refusals_are_permission_errors() {
        // The servers' own words (Redis 6.2, 7.0, 7.4, Valkey 9.1).
        let denied = [
            (
                Some("NOPERM"),
                "NOPERM this user has no permissions to run the 'lpop' command",
            ),
            (Some("NOPERM"), "NOPERM No permissions to access a key"),
            (
                Some("ERR"),
                "ERR Error running script (call to f_9): @user_script:1: @user_script: 1: \
                 The user executing the script can't publish to the channel mentioned in the command",
            ),
            (
                Some("ERR"),
                "ERR The user executing the script can't access at least one of the keys \
                 mentioned in the command arguments script: 3b0b, on @user_script:1.",
            ),
            (
                Some("ERR"),
                "ERR ACL failure in script: No permissions to access a channel script: on @user_script:1.",
            ),
        ];
        for (code, message) in denied {
            assert!(is_permission_error(code, message), "{message}");
        }
        let other = [
            (Some("ERR"), "ERR syntax error"),
            (
                Some("WRONGTYPE"),
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            ),
            (Some("NOSCRIPT"), "NOSCRIPT No matching script"),
            (None, "broken pipe"),
        ];
        for (code, message) in other {
            assert!(!is_permission_error(code, message), "{message}");
        }
    }
}
