//! Releasing: the compare-and-delete round on every node, the hand-off to the next waiter
//! it announces, and [`Holding`], the duty to remove a token that may be stored on some
//! nodes, which a failed attempt, a release and a dropped guard or attempt all go through.

use std::sync::Arc;

use redis::Value;

use crate::ensemble::ShutDownLock;
use crate::ensemble::config::whole_ms;
use crate::ensemble::{Ensemble, InFlight};
use crate::error::{Error, Result};
use crate::metrics;
use crate::net::answers::{self, Collected, Stop};
use crate::net::call::Call;
use crate::net::fanout::{self, Round};
use crate::net::node::Node;
use crate::net::send_gate::SendGate;
use crate::protocol::access::Access;
use crate::protocol::{keys, native, permit_scripts, reply, rw_scripts, scripts};
use crate::report::{NodeOutcome, NodeReport};
use crate::rules::quorum;
use crate::rules::retry::RetryPolicy;
use crate::wait::Requeue;
use crate::wait::queue::LocalHold;

/// A token that may be stored on some nodes, with the duty to remove it.
///
/// While armed, dropping it sends compare-and-delete to every node from a spawned task.
/// It is armed from before an attempt's first request until the lock is released, so no
/// cancellation point can leave a key behind (beyond its TTL when no runtime is left).
pub(crate) struct Holding {
    ensemble: Arc<Ensemble>,
    keys: Arc<[String]>,
    token: Arc<str>,
    /// What the token holds, which says how it is removed.
    access: Access,
    /// Closed by every release of this token before it sends (see [`SendGate`]).
    gate: Arc<SendGate>,
    armed: bool,
    /// Set once acquired: tells the local queue when our release has completed.
    local: Option<LocalHold>,
    /// An attempt's: shutdown waits for it (and for the clean-up its drop sends) until the
    /// guard is registered ([`Holding::registered`]).
    in_flight: Option<InFlight>,
}

impl Holding {
    pub(crate) fn new(
        ensemble: Arc<Ensemble>,
        keys: Arc<[String]>,
        token: Arc<str>,
        access: Access,
    ) -> Self {
        let in_flight = Some(ensemble.in_flight());
        Holding {
            ensemble,
            keys,
            token,
            access,
            gate: Arc::new(SendGate::new()),
            armed: true,
            local: None,
            in_flight,
        }
    }

    /// The attempt is over: its lock is registered for shutdown to release.
    pub(crate) fn registered(&mut self) {
        self.in_flight = None;
    }

    /// The duty of a lock whose release someone else answers for (client shutdown): the
    /// same keys, token and gate, unarmed.
    pub(crate) fn adopt(held: ShutDownLock) -> Self {
        let ShutDownLock {
            ensemble,
            keys,
            token,
            gate,
            access,
        } = held;
        Holding {
            ensemble,
            keys,
            token,
            access,
            gate,
            armed: false,
            local: None,
            in_flight: None,
        }
    }

    /// Releases on every node and waits for every answer (bounded by the node timeout),
    /// waking the next waiting client: the release of client shutdown, after which no
    /// request of this client is sent any more.
    pub(crate) async fn release_everywhere(&self) -> NodeReport {
        let n = self.ensemble.nodes.len();
        let mut round = self.release_round(0..n, true);
        let collected = answers::collect(
            &self.ensemble.nodes,
            &mut round,
            |_, r| self.released(r),
            |_| false,
            Stop::AtEnd,
        )
        .await;
        collected.report(&self.ensemble.nodes)
    }

    /// Gives up the duty to remove the token without sending anything: the lock is handed
    /// on (a ticket), or was never ours to remove (a refused adoption).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Marks the keys as held by this client (see [`LocalQueue`](crate::wait::queue)).
    pub(crate) fn hold_locally(&mut self) {
        self.local = Some(self.ensemble.queue.hold(&self.keys));
    }

    pub(crate) fn ensemble(&self) -> &Arc<Ensemble> {
        &self.ensemble
    }

    pub(crate) fn keys(&self) -> &Arc<[String]> {
        &self.keys
    }

    pub(crate) fn token(&self) -> &Arc<str> {
        &self.token
    }

    pub(crate) fn access(&self) -> Access {
        self.access
    }

    /// The gate of the requests that may set this token's keys.
    pub(crate) fn gate(&self) -> &Arc<SendGate> {
        &self.gate
    }

    /// Compare-and-delete on the nodes in `which`, waking the next waiting client when
    /// notifications are on and `announce` is set: only the waiting-list node
    /// ([`Holding::list_node`]) gets the waking release, every other node the plain one
    /// (`DELIFEQ` where it has the same effect), as nobody is listed there. Closes the gate
    /// first, so no request that could set a key of this token is written after the
    /// release.
    fn release_round(&self, which: impl IntoIterator<Item = usize>, announce: bool) -> Round {
        self.gate.close();
        let waking = (self.list_node())
            .filter(|_| announce)
            .map(|node| (node, self.release_call(true)));
        Round::broadcast_with(
            self.ensemble.round_scope(),
            self.release_call(false),
            which,
            waking,
        )
    }

    /// After a semaphore slot's release: its count record and its name's mark go, on each
    /// node where no slot of the count is left (see [`forget_permit_count`]).
    fn forget_after_release(&self) {
        if let (Some(permits), [slot_key]) = (self.access.permit_count(), &self.keys[..]) {
            let n = self.ensemble.nodes.len();
            forget_permit_count(&self.ensemble, slot_key, permits, 0..n);
        }
    }

    /// The node whose waiting lists a release pops, with notifications on: this client's own
    /// waiting-list node (the first in configuration order where its subscription stands,
    /// see [`Notifier::wake_node`](crate::wait::notify::Notifier::wake_node)), or the first
    /// node while it has none (it never waited, or no subscription stands): the one clients
    /// configured alike list on when their subscriptions stand. A waiter listed elsewhere
    /// (its subscription there is down) is not woken by this release and polls.
    fn list_node(&self) -> Option<usize> {
        let notifier = self.ensemble.notifier.as_ref()?;
        Some(notifier.wake_node().unwrap_or(0))
    }

    /// The release's call. One key: the waking script when it announces (see
    /// [`scripts::RELEASE_ONE`]), else the plain compare-and-delete ([`scripts::UNLOCK`], or
    /// `DELIFEQ` on nodes that have it: see [`native`](crate::protocol::native)). Several
    /// keys: the general release script. When it announces, the client it wakes gets the
    /// turn for two node timeouts (see [`scripts::GATE`]).
    fn release_call(&self, announce: bool) -> Call {
        let wakes = announce && self.ensemble.notifier.is_some();
        let config = &self.ensemble.config;
        if self.access.is_shared() {
            return self.read_release_call(wakes);
        }
        match &*self.keys {
            [_] if wakes => Call::script(&scripts::RELEASE_ONE, config.space(), &self.keys)
                .arg(&*self.token)
                .arg(self.turn_ms())
                .arg(keys::wake_channel_prefix(&config.key_prefix))
                .delivered(),
            [key] => {
                let call = Call::script(&scripts::UNLOCK, config.space(), &self.keys)
                    .arg(&*self.token)
                    .delivered();
                if config.native_commands {
                    call.or_native(native::del_if_eq(key, &self.token))
                } else {
                    call
                }
            }
            _ => self.release_script(wakes),
        }
    }

    /// A reader's release: its token out of the readers, waking the next waiter when
    /// `wakes` and no live reader is left; more arguments may follow (the requeue of
    /// [`release_on`](Self::release_on)).
    fn read_release_call(&self, wakes: bool) -> Call {
        let space = self.ensemble.config.space();
        let call = Call::script(&rw_scripts::READ_RELEASE, space, &self.keys).arg(&*self.token);
        let call = if wakes {
            call.arg(self.turn_ms())
        } else {
            call.arg("0")
        };
        call.arg(keys::wake_channel_prefix(space.prefix))
            .delivered()
    }

    /// The lifetime of the turn a waking release gives the client it wakes: two node
    /// timeouts, at least 1 ms.
    fn turn_ms(&self) -> u64 {
        whole_ms(RetryPolicy::turn_lifetime(
            self.ensemble.config.node_timeout,
        ))
        .max(1)
    }

    /// The general release script, waking the next waiter when `wakes`; more arguments may
    /// follow (the requeue of [`release_on`](Self::release_on), which no other script or
    /// native command does).
    fn release_script(&self, wakes: bool) -> Call {
        if self.access.is_shared() {
            return self.read_release_call(wakes);
        }
        let call = Call::script(&scripts::RELEASE, self.ensemble.config.space(), &self.keys)
            .arg(&*self.token)
            .delivered();
        let call = if wakes {
            call.arg(self.turn_ms())
        } else {
            call.arg("0")
        };
        call.arg(keys::wake_channel_prefix(&self.ensemble.config.key_prefix))
    }

    /// Turns a release reply (see [`reply::release_reply`]) into an outcome.
    fn released(&self, reply: Value) -> NodeOutcome {
        match reply::release_reply(reply) {
            Ok(released) => {
                if released.woke {
                    // Another client was woken to take over: let it go first (see
                    // `LocalQueue::handed_off`).
                    self.ensemble
                        .queue
                        .handed_off(&self.keys, self.ensemble.config.node_timeout);
                }
                if released.deleted {
                    NodeOutcome::Released
                } else {
                    NodeOutcome::NotHeld
                }
            }
            Err(failed) => failed,
        }
    }

    /// Releases the lock on every node and decides (see `LockGuard::release` for what each
    /// outcome means); `expired` when the validity had run out before. Disarms.
    ///
    /// Once the client is shut down it still releases, and says [`Error::ShutDown`].
    /// Counted as work under way before the check (as an attempt is, see
    /// `Ensemble::begin_attempt`): a shutdown that closes after the check waits for this
    /// release. One that closed before takes the locks still held only once the work under
    /// way is done, when this guard may be gone: so the keys go now, on connections still
    /// open (closed ones refuse at once).
    pub(crate) async fn release(&mut self, expired: bool) -> Result<NodeReport> {
        let _in_flight = self.ensemble.in_flight();
        let closed = self.ensemble.is_closed();
        let mut released = self.release_and_decide(expired).await;
        if released.is_err()
            && self.ensemble.config.slotted
            && let Some(moved) = self.ensemble.moved_seat(&self.keys).await
        {
            // The lock's slot moved with its keys: released where they are now.
            self.ensemble = moved;
            released = self.release_and_decide(expired).await;
        }
        match closed {
            true => Err(Error::ShutDown),
            false => released,
        }
    }

    /// The body of [`release`](Self::release).
    async fn release_and_decide(&mut self, expired: bool) -> Result<NodeReport> {
        // Where the lock's slot is now, as far as the table knows.
        self.ensemble = self.ensemble.seated(&self.keys).await;
        let ensemble = Arc::clone(&self.ensemble);
        if let [node] = &ensemble.nodes[..] {
            return self.release_direct(node, expired).await;
        }
        let n = ensemble.nodes.len();
        let mut round = self.release_round(0..n, true);
        // Local hand-off: the next task of this client waiting for these keys may send its
        // acquire as soon as our release is on the connections. Each node applies the two in
        // order, so its SET succeeds wherever our delete did, one round trip earlier than if
        // it waited for our answers.
        round.start();
        drop(self.local.take());
        // With wake-ups on and a subscription of this client standing, hear the node that
        // keeps the waiting lists even when it is not among the first answers: its reply
        // says whether another client was woken, and only then does this client let it go
        // first on its next `lock()`. A client that never waited does not wait for that node
        // (a slow list node would slow every release: bench scenario 3a); a waiter it wakes
        // then races its next `lock()` fairly. A release that finds no majority waits for
        // every answer (bounded by the node timeout): "not held" and "unavailable" are told
        // apart by what each node said.
        let stop = Stop::WhenReached(ensemble.notifier.as_ref().and_then(|n| n.wake_node()));
        let this = &*self;
        let collected = answers::collect(
            &ensemble.nodes,
            &mut round,
            |_, r| this.released(r),
            |o| *o == NodeOutcome::Released,
            stop,
        )
        .await;
        round.finish_in_background(ensemble.round_scope());
        self.forget_after_release();
        self.released_explicitly(&collected, expired)
    }

    /// [`release`](Self::release) with a single node, on the direct path (see
    /// [`fanout::direct`]): the same steps, the request awaited in place.
    async fn release_direct(&mut self, node: &Arc<Node>, expired: bool) -> Result<NodeReport> {
        let call = self.release_call(true);
        self.gate.close();
        let request = fanout::direct(node, &call, self.ensemble.config.node_timeout);
        tokio::pin!(request);
        // Queued on the connection before the local hand-off, as `Round::start` does.
        let early = fanout::start(request.as_mut());
        drop(self.local.take());
        let answer = match early {
            Some(answer) => answer,
            None => request.await,
        };
        let this = &*self;
        let collected = answers::collected_one(
            &self.ensemble.nodes,
            0,
            answer,
            |_, r| this.released(r),
            |o| *o == NodeOutcome::Released,
        );
        self.forget_after_release();
        self.released_explicitly(&collected, expired)
    }

    /// Disarms and decides on an explicit release's outcomes.
    fn released_explicitly(&mut self, collected: &Collected, expired: bool) -> Result<NodeReport> {
        self.armed = false;
        metrics::released("explicit");
        // After the validity ran out, whatever was still on the nodes is gone now, but the
        // lock was not safely held up to this release: say so, like the seeds'
        // `ExpiredLockError`.
        let votes = quorum::votes(&collected.outcomes, &NodeOutcome::Released);
        let report = collected.report(&self.ensemble.nodes);
        quorum::decide_release(&votes, expired)
            .into_result(|| report.clone())
            .map(|_| report)
    }

    /// Cleans up after a failed attempt: releases on the nodes in `which`, waiting for every
    /// answer (bounded by the node timeout), then disarms. Wakes nobody: no lock was held,
    /// and a waiter woken now would only race this client's next attempt (or the client a
    /// real release woke, whose attempt this one may just have spoiled). With `requeue`,
    /// the release on the waiting-list node also puts this client back in the list.
    /// Returns the round's report when a node's ACL refused it (the key may stay there
    /// until its TTL ends): a configuration error the attempt must report.
    pub(crate) async fn release_on(
        &mut self,
        which: impl IntoIterator<Item = usize>,
        requeue: Option<Requeue<'_>>,
    ) -> Option<NodeReport> {
        let mut which: Vec<usize> = which.into_iter().collect();
        // An attempt that did not list us on the waiting-list node (a woken client's plain
        // `SET` there) requeues us there even where that `SET` was refused.
        if let Some(r) = requeue.filter(|r| r.unlisted && !which.contains(&r.node)) {
            which.push(r.node);
        }
        let ensemble = Arc::clone(&self.ensemble);
        if let [node] = &ensemble.nodes[..] {
            return self
                .release_on_direct(&ensemble, node, which, requeue)
                .await;
        }
        let special = requeue.map(|r| {
            let call = self
                .release_script(false)
                .arg(r.client)
                .arg(scripts::flag(r.front))
                .arg(r.list_ttl_ms);
            (r.node, call)
        });
        self.gate.close();
        let mut round = Round::broadcast_with(
            self.ensemble.round_scope(),
            self.release_call(false),
            which,
            special,
        );
        let this = &*self;
        let collected = answers::collect(
            &self.ensemble.nodes,
            &mut round,
            |_, r| this.released(r),
            |_| false,
            Stop::AtEnd,
        )
        .await;
        self.armed = false;
        self.refused(&collected)
    }

    /// [`release_on`](Self::release_on) with a single node, on the direct path (see
    /// [`fanout::direct`]): only the call that node gets is built, and awaited in place.
    async fn release_on_direct(
        &mut self,
        ensemble: &Ensemble,
        node: &Arc<Node>,
        which: impl IntoIterator<Item = usize>,
        requeue: Option<Requeue<'_>>,
    ) -> Option<NodeReport> {
        self.gate.close();
        let nodes = &ensemble.nodes;
        let collected = if which.into_iter().any(|i| i == 0) {
            let call = match requeue {
                Some(r) if r.node == 0 => self
                    .release_script(false)
                    .arg(r.client)
                    .arg(scripts::flag(r.front))
                    .arg(r.list_ttl_ms),
                _ => self.release_call(false),
            };
            let answer = fanout::direct(node, &call, ensemble.config.node_timeout).await;
            answers::collected_one(nodes, 0, answer, |_, r| self.released(r), |_| false)
        } else {
            // Nothing to release: what an empty round collects.
            answers::collected_none(nodes)
        };
        self.armed = false;
        self.refused(&collected)
    }

    /// The report of a clean-up round when a node's ACL refused it.
    fn refused(&self, collected: &Collected) -> Option<NodeReport> {
        let refused =
            (collected.outcomes.iter()).any(|(o, _)| matches!(o, NodeOutcome::PermissionDenied(_)));
        refused.then(|| collected.report(&self.ensemble.nodes))
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.gate.close();
        // Never block or do I/O here: hand the release to the runtime if there is one,
        // otherwise the TTL frees the lock.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let n = self.ensemble.nodes.len();
                // A lock's release wakes the next waiter; an abandoned attempt's wakes
                // nobody: it held no lock, and the release of the lock its waiters wait
                // for wakes them (the waking scripts wake where our key is absent too).
                let mut round = self.release_round(0..n, self.in_flight.is_none());
                let local = self.local.take();
                let ensemble = Arc::clone(&self.ensemble);
                // Shutdown waits for this release as for an attempt's clean-up: a lock
                // dropped while the client shuts down may be gone before shutdown takes
                // the locks still held. After shutdown the closed nodes refuse at once.
                let in_flight = (self.in_flight.take()).unwrap_or_else(|| ensemble.in_flight());
                handle.spawn(async move {
                    answers::collect(
                        &ensemble.nodes,
                        &mut round,
                        |_, _| NodeOutcome::Released,
                        |_| false,
                        Stop::AtEnd,
                    )
                    .await;
                    // Only now may the next local task try (and shutdown go on).
                    drop(local);
                    drop(in_flight);
                });
                metrics::released("drop");
            }
            Err(_) => metrics::released("skipped"),
        }
    }
}

/// Removes, in the background, a semaphore's count record and its name's mark on the nodes
/// `which` where no slot of `permits` is left (`PERMIT_FORGET`), named by one slot's lock
/// key: after a failed attempt released the slot it took, and after a holder's release.
/// Best effort: what it misses expires within the TTL of its last grant or extension.
pub(crate) fn forget_permit_count(
    ensemble: &Ensemble,
    slot_key: &str,
    permits: u32,
    which: impl IntoIterator<Item = usize>,
) {
    let space = ensemble.config.space();
    let slots = keys::permit_slots_of_key(space, slot_key, permits);
    let call = Call::script(&permit_scripts::PERMIT_FORGET, space, &slots).arg(permits);
    let scope = ensemble.round_scope();
    Round::broadcast(scope, call, which).finish_in_background(scope);
}
