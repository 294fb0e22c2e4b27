//! The command a round sends, [`Call`]: built once and shared by every node's request,
//! sent as a script (`EVALSHA`, loading the source on `NOSCRIPT`) or as the native command
//! that stands in for it, through its token's send gate, and delivered even when nobody
//! waits for its answer any more where that matters (a release).

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::{Cmd, RedisError, RedisResult, ToRedisArgs, Value};

use crate::net::send_gate::SendGate;
use crate::protocol::keys::Space;
use crate::protocol::native::{Capabilities, Native};
use crate::protocol::scripts::Lua;

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
    /// written (see [`Node::send`](super::node::Node::send)). Only for commands whose second run changes nothing the
    /// first did not; never for one that may set a lock key.
    repeatable: bool,
    /// Must reach its node even when nobody waits for its answer any more (see
    /// [`Delivery`]): a release.
    delivered: bool,
    /// A write a holder's vote rests on (an acquisition, an extension): where the client
    /// asks for replicas' acknowledgements, its answer counts only once they came (see
    /// [`ReplicaAcks`](super::replica_acks::ReplicaAcks)).
    vote_write: bool,
}

/// A failed send, and whether the command provably never reached the server.
pub(super) struct SendError {
    pub(super) error: RedisError,
    /// The connection refused the command at its first poll with a connection error: the
    /// driver had already stopped (its channel closed, or its socket known broken), so
    /// nothing was written. A failure after that first poll proves nothing: the command
    /// may have been written, and applied, before the connection broke.
    pub(super) unsent: bool,
}

impl From<RedisError> for SendError {
    fn from(error: RedisError) -> Self {
        SendError {
            error,
            unsent: false,
        }
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
            vote_write: false,
        }
    }

    /// Marks a plain command as safe to send twice (a read, an idempotent delete): see
    /// [`Node::send`](super::node::Node::send).
    pub(crate) fn repeatable(mut self) -> Self {
        self.repeatable = self.gate.is_none();
        self
    }

    /// `EVALSHA` of `lua` for the lock keys `locks` in `space` (the script gets them and
    /// the keys derived from them, in its layout); add its arguments with [`Call::arg`].
    pub(crate) fn script(lua: &'static Lua, space: Space<'_>, locks: &[String]) -> Self {
        // Sized once for the name, digest, key count, keys and the usual arguments (a
        // token, a TTL, a few flags), instead of growing with every argument; the keys are
        // written into the command from their parts (see `keys::Name`).
        let keys = lua.keys(space, locks);
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
            vote_write: false,
        }
    }

    /// Sends this call only while `gate` is open (see [`SendGate`]). A gated call is never
    /// repeated: it may set a lock key.
    pub(crate) fn gated(mut self, gate: &Arc<SendGate>) -> Self {
        self.gate = Some(Arc::clone(gate));
        self.repeatable = false;
        self.vote_write = true;
        self
    }

    /// Marks a write that a holder's vote rests on without a gate (an extension): see
    /// [`ReplicaAcks`](super::replica_acks::ReplicaAcks). Gated calls are marked already.
    pub(crate) fn vote_write(mut self) -> Self {
        self.vote_write = true;
        self
    }

    /// Whether the answer counts only once replicas acknowledged it, where asked for.
    pub(super) fn is_vote_write(&self) -> bool {
        self.vote_write
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

    /// Whether the call may be sent once more after its connection refused it unwritten
    /// (see [`Node::send`](super::node::Node::send)).
    pub(super) fn is_repeatable(&self) -> bool {
        self.repeatable
    }

    /// Sends this call on `conn` (see [`run`](Self::run)), delivered even if this future is
    /// dropped before the answer when the call is marked so (see [`Delivery`]).
    pub(super) async fn send_on(
        &self,
        conn: MultiplexedConnection,
        capabilities: Capabilities,
    ) -> Result<Option<Value>, SendError> {
        let mut delivery = Delivery {
            conn,
            armed: self.delivered.then_some(self),
            capabilities,
        };
        let result = self.run(&mut delivery.conn, capabilities).await;
        delivery.armed = None;
        result
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
