//! What a held lock shares with its extender and with the code running under it: the
//! validity deadline, extension on a quorum, and the lost-lock signal.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::ensemble::config::whole_ms;
use crate::ensemble::{Ensemble, Held, ShutDownLock};
use crate::error::{Error, LostReason, Result};
use crate::held::release::Holding;
use crate::metrics;
use crate::net::answers::{self, Stop};
use crate::net::call::Call;
use crate::net::fanout::{self, Round};
use crate::net::send_gate::SendGate;
use crate::protocol::access::Access;
use crate::protocol::{native, reply};
use crate::report::{NodeOutcome, NodeReport, QuarantineReason};
use crate::rules::quorum::{self, Decision};
use crate::rules::safety;

/// The mutable part of a lease, published through its [`Status`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct State {
    pub(crate) deadline: Instant,
    pub(crate) ttl: Duration,
    pub(crate) lost: Option<LostReason>,
    /// Remaining validity when an extension last failed without losing the lock; cleared
    /// by a successful extension.
    pub(crate) at_risk: Option<Duration>,
}

/// A lease's [`State`] and the waiters for its changes, shared with its [`LostSignal`]s.
///
/// A mutex and one [`Notify`] (~110 bytes with its `Arc`): a held lock keeps one, and a
/// `watch` channel (a state, nine `Notify`s, ~390 bytes) was the largest part of a held
/// lock's memory. Whoever waits registers with `changed` before reading the state, so no
/// change made in between is missed.
#[derive(Debug)]
struct Status {
    state: std::sync::Mutex<State>,
    changed: Notify,
}

impl Status {
    fn get(&self) -> State {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `change`; when it says it changed something, wakes every waiter.
    fn modify(&self, change: impl FnOnce(&mut State) -> bool) -> bool {
        let changed = change(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
        if changed {
            self.changed.notify_waiters();
        }
        changed
    }
}

/// A lock's identity and state, shared by its guard, its extender and any [`LockContext`].
pub(crate) struct Lease {
    pub(crate) ensemble: Arc<Ensemble>,
    pub(crate) keys: Arc<[String]>,
    pub(crate) resources: Arc<[String]>,
    pub(crate) token: Arc<str>,
    /// What the token holds, which says how it is extended.
    access: Access,
    /// The send gate of the lock's token, closed by every release (see `SendGate`).
    gate: Arc<SendGate>,
    /// The auto-extender, aborted when the client shuts down.
    extender: std::sync::Mutex<Option<AbortHandle>>,
    /// The TTL the lock was acquired with: every node holding its key has an ensemble
    /// record at least this long (the acquisition raised it, or the fast path knew it), so
    /// an extension up to it needs no record raise and may go native.
    acquired_ttl: Duration,
    status: Arc<Status>,
}

impl fmt::Debug for Lease {
    /// Without the token, which is a capability (see [`LockTicket`](crate::LockTicket)),
    /// but for its first digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("resources", &self.resources)
            .field("token", &token_prefix(&self.token))
            .field("access", &self.access)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

/// The first eight characters of a lock's stored value and `…`: enough to tell locks apart
/// (as `status` shows owners), too little to act as the lock's holder.
pub(crate) fn token_prefix(token: &str) -> String {
    let end = token.char_indices().nth(8).map_or(token.len(), |(i, _)| i);
    format!("{}…", &token[..end])
}

impl Lease {
    pub(crate) fn new(
        holding: &Holding,
        resources: Arc<[String]>,
        deadline: Instant,
        ttl: Duration,
    ) -> Self {
        let status = Arc::new(Status {
            state: std::sync::Mutex::new(State {
                deadline,
                ttl,
                lost: None,
                at_risk: None,
            }),
            changed: Notify::new(),
        });
        Lease {
            ensemble: Arc::clone(holding.ensemble()),
            keys: Arc::clone(holding.keys()),
            resources,
            token: Arc::clone(holding.token()),
            access: holding.access(),
            gate: Arc::clone(holding.gate()),
            extender: std::sync::Mutex::new(None),
            acquired_ttl: ttl,
            status,
        }
    }

    /// Records the auto-extender's task, so that shutdown can stop it.
    pub(crate) fn set_extender(&self, handle: Option<AbortHandle>) {
        *self.extender.lock().unwrap_or_else(|p| p.into_inner()) = handle;
    }

    pub(crate) fn state(&self) -> State {
        self.status.get()
    }

    /// Marks the lease lost (the first reason sticks).
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        let first = self.status.modify(|s| {
            if s.lost.is_none() {
                s.lost = Some(reason);
                true
            } else {
                false
            }
        });
        if first {
            match reason {
                LostReason::Expired => metrics::lost("expired"),
                LostReason::NotHeld => metrics::lost("not_held"),
                LostReason::Released | LostReason::ShutDown | LostReason::Detached => {}
            }
            if !matches!(
                reason,
                LostReason::Released | LostReason::ShutDown | LostReason::Detached
            ) {
                tracing::warn!(resources = ?self.resources, %reason, "lock lost");
            }
        }
    }

    /// Records a failed extension with `remaining` validity: the lock is at risk (the first
    /// failure since the last success is what the signal reports).
    pub(crate) fn mark_at_risk(&self, remaining: Duration) {
        self.status.modify(|s| {
            if s.lost.is_none() && s.at_risk.is_none() {
                s.at_risk = Some(remaining);
                true
            } else {
                false
            }
        });
    }

    pub(crate) fn signal(&self) -> LostSignal {
        LostSignal {
            status: Arc::clone(&self.status),
        }
    }

    /// Remaining validity, zero once lost or expired.
    pub(crate) fn validity(&self) -> Duration {
        let s = self.state();
        if s.lost.is_some() {
            return Duration::ZERO;
        }
        s.deadline.saturating_duration_since(Instant::now())
    }

    /// Compare-and-PEXPIRE on every node; see [`LockGuard::extend`](crate::LockGuard::extend).
    pub(crate) async fn extend(&self, ttl: Duration) -> Result<Duration> {
        let span = tracing::debug_span!(
            "quorum_lock.extend",
            resources = ?self.resources,
            ?ttl,
            votes = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let result = self.extend_inner(ttl).instrument(span.clone()).await;
        match &result {
            Ok(_) => span.record("outcome", "extended"),
            Err(e) => span.record("outcome", tracing::field::display(e)),
        };
        result
    }

    /// The extension's call for `ttl`: the script of the lock's kind (a slot's also keeps
    /// its semaphore's count record alive), which also writes the lock back where the node
    /// lost it when `reseat` names the life the node was seen admitted in (see
    /// [`reseat_lost_copies`](Self::reseat_lost_copies)); for a mutex's or a writer's one
    /// key and no re-seat, `SET ... IFEQ ... PX` on the nodes
    /// that have it, the same effect as the script (see `protocol::native`) as long as the
    /// ensemble record needs no raise (a TTL up to the acquisition's, see `acquired_ttl`);
    /// several keys need the script's all or nothing, and a longer TTL the script's record
    /// raise (restart quarantine).
    fn extend_call(&self, ttl: Duration, reseat: Option<&str>) -> Call {
        let ensemble = &self.ensemble;
        let script = self.access.extend_script();
        let mut call = Call::script(script, ensemble.config.space(), &self.keys)
            .vote_write()
            .arg(&*self.token)
            .arg(whole_ms(ttl));
        if let Some(count) = self.access.permit_count() {
            // Keeps the count record alive as long as the slot.
            call = call.arg(count);
        }
        if let Some(life) = reseat {
            return call.arg(life);
        }
        match &*self.keys {
            [key]
                if ensemble.config.native_commands
                    && ttl <= self.acquired_ttl
                    && self.access.extends_natively() =>
            {
                call.or_native(native::set_if_eq(key, &self.token, whole_ms(ttl)))
            }
            _ => call,
        }
    }

    /// After an extension that a majority renewed: writes the holder's copy back (see
    /// `EXTEND`) on the nodes that answered that they lack it, where this client saw the
    /// node admitted in its current life (never on a Cluster member, whose markers are per
    /// slot). Safe because the renewals hold a majority until the new validity ends, so no
    /// other client may hold the lock; never overwrites another token. In the background,
    /// and not a vote: the copy counts from the next extension on.
    fn reseat_lost_copies(&self, ttl: Duration, outcomes: &[(NodeOutcome, Duration)]) {
        let ensemble = &self.ensemble;
        if ensemble.config.slotted {
            return;
        }
        let calls: Vec<(usize, Arc<Call>)> = (outcomes.iter().enumerate())
            .filter(|(_, (outcome, _))| *outcome == NodeOutcome::NotHeld)
            .filter_map(|(i, _)| {
                let life = ensemble.nodes.get(i)?.known().admitted_life()?;
                Some((i, Arc::new(self.extend_call(ttl, Some(&life)))))
            })
            .collect();
        if !calls.is_empty() {
            let scope = ensemble.round_scope();
            Round::pairs(scope, &calls).finish_in_background(scope);
        }
    }

    /// Extends on the nodes where the lock's keys are now: on a Cluster member whose slot
    /// moved (with its keys) since the lock was taken, an extension that a node did not
    /// renew is sent once more on the new owner, once the table is learnt again, also when
    /// the other members renewed it (the copy on the new owner would otherwise run out).
    async fn extend_inner(&self, ttl: Duration) -> Result<Duration> {
        let view = self.ensemble.seated(&self.keys).await;
        let (extended, every_node) = self.extend_on(&view, ttl).await;
        if every_node || !view.config.slotted {
            return extended;
        }
        let Some(moved) = view.moved_seat(&self.keys).await else {
            return extended;
        };
        let (again, _) = self.extend_on(&moved, ttl).await;
        match (extended, again) {
            (Ok(validity), Err(_)) => Ok(validity),
            (_, again) => again,
        }
    }

    /// One extension on the nodes of `ensemble` (a view of the lock's client), and whether
    /// no node that answered refused it.
    async fn extend_on(&self, ensemble: &Arc<Ensemble>, ttl: Duration) -> (Result<Duration>, bool) {
        let ttl = match ensemble.accept_ttl(ttl) {
            Ok(ttl) => ttl,
            Err(e) => return (Err(e), true),
        };
        if self.validity().is_zero() {
            metrics::extended("not_held");
            self.mark_lost(LostReason::Expired);
            let not_held = Error::NotHeld {
                report: NodeReport::default(),
            };
            return (Err(not_held), true);
        }
        let start = Instant::now();
        // From the first send on, nodes may apply the new TTL whatever becomes of this call:
        // unless it succeeds, the guard keeps only what is sure either way (see `Unsettled`).
        let unsettled = Unsettled {
            lease: self,
            ttl,
            start,
        };
        let call = self.extend_call(ttl, None);
        let interpret = |i: usize, r| vouched(ensemble, i, extended_or_not(r));
        let is_yes = |o: &NodeOutcome| *o == NodeOutcome::Extended;
        let (collected, decided, late_agree) = if let [node] = &ensemble.nodes[..] {
            // The direct path of a single node (see `fanout::direct`).
            let answer = fanout::direct(node, &call, ensemble.config.node_timeout).await;
            let collected = answers::collected_one(&ensemble.nodes, 0, answer, interpret, is_yes);
            (collected, Instant::now(), true)
        } else {
            let mut round = Round::everywhere(ensemble.round_scope(), call);
            let collected = answers::collect(
                &ensemble.nodes,
                &mut round,
                interpret,
                is_yes,
                Stop::WhenCertain,
            )
            .await;
            let decided = Instant::now();
            let late_agree = late_cluster_answers_agree(ensemble, &mut round, &collected).await;
            // The other nodes still get their extension: more copies of the lock, same token.
            round.finish_in_background(ensemble.round_scope());
            (collected, decided, late_agree)
        };
        let elapsed = decided - start;
        let votes = quorum::votes(&collected.outcomes, &NodeOutcome::Extended);
        let validity = safety::lease_validity(ttl, elapsed, ensemble.config.drift_factor);
        let decision = quorum::decide_extend(&votes, elapsed, validity);
        match decision {
            Decision::Won { validity } => {
                std::mem::forget(unsettled);
                self.status.modify(|s| {
                    s.deadline = crate::rules::deadline::after(decided, validity);
                    s.ttl = ttl;
                    s.at_risk = None;
                    true
                });
                metrics::extended("extended");
                tracing::Span::current().record("votes", collected.tally.yes());
                tracing::debug!(?elapsed, "extended");
                self.reseat_lost_copies(ttl, &collected.outcomes);
            }
            // Too many nodes said definitely not ours: nothing can bring it back.
            Decision::NotHeld => self.mark_lost(LostReason::NotHeld),
            _ => {}
        }
        if !matches!(decision, Decision::Won { .. }) {
            metrics::extended(decision.label());
        }
        // A node the round stopped waiting for is no sign of a move; a Cluster member's late
        // answer was waited for above.
        let every_node = late_agree
            && (collected.outcomes.iter())
                .all(|(o, _)| matches!(o, NodeOutcome::Extended | NodeOutcome::Pending));
        let result = decision.into_result(|| collected.report(&ensemble.nodes));
        (result, every_node)
    }
}

/// Whether every Cluster member of `ensemble` that had not answered when `collected` was
/// decided extends the lock once it answers (waited for until the round's deadline): a
/// redirect there is the sign that the lock's slot moved, and the round decided without it
/// whenever the other members answered first.
async fn late_cluster_answers_agree(
    ensemble: &Ensemble,
    round: &mut Round,
    collected: &answers::Collected,
) -> bool {
    if !ensemble.config.slotted {
        return true;
    }
    let unheard: Vec<usize> = (collected.outcomes.iter().enumerate())
        .filter(|(i, (o, _))| *o == NodeOutcome::Pending && ensemble.cluster_of(*i).is_some())
        .map(|(i, _)| i)
        .collect();
    if unheard.is_empty() {
        return true;
    }
    let heard_all = |outcomes: &[(NodeOutcome, Duration)], _| {
        (unheard.iter()).all(|&i| {
            outcomes
                .get(i)
                .is_none_or(|(o, _)| *o != NodeOutcome::Pending)
        })
    };
    let late = answers::collect_until(
        &ensemble.nodes,
        round,
        |_, reply| extended_or_not(reply),
        |_| false,
        heard_all,
    )
    .await;
    (unheard.iter())
        .all(|&i| (late.outcomes.get(i)).is_some_and(|(o, _)| *o == NodeOutcome::Extended))
}

/// What one node answered an extension.
fn extended_or_not(reply: Value) -> NodeOutcome {
    reply::one_or(reply, NodeOutcome::Extended, NodeOutcome::NotHeld)
}

/// `outcome` of node `i`, unless it is a yes that the node's membership does not vouch for
/// (a Sentinel or Cluster member whose master was not confirmed lately, see
/// `Ensemble::vouches`): that one does not count, as in an acquisition.
fn vouched(ensemble: &Ensemble, i: usize, outcome: NodeOutcome) -> NodeOutcome {
    let unvouched = !ensemble.vouches(i);
    match outcome {
        NodeOutcome::Extended if unvouched => NodeOutcome::Quarantined {
            reason: QuarantineReason::NoIdentity,
            remaining: None,
        },
        outcome => outcome,
    }
}

/// An extension sent and not (yet) successful: nodes may have applied its TTL or not. When
/// it ends without success (failed, too late, cancelled), the guard's validity becomes the
/// lower bound of what the nodes may hold ([`safety::after_failed_extension`]): the old
/// deadline, or the new TTL's validity counted from the send if that ends sooner (an
/// extension to a shorter TTL). Nothing at all when neither is left.
struct Unsettled<'a> {
    lease: &'a Lease,
    ttl: Duration,
    start: Instant,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        let drift = self.lease.ensemble.config.drift_factor;
        let lost = self.lease.status.modify(|s| {
            if s.lost.is_some() {
                return false;
            }
            let old = s.deadline.saturating_duration_since(now);
            match safety::after_failed_extension(
                old,
                self.ttl,
                now.saturating_duration_since(self.start),
                drift,
            ) {
                Some(left) if crate::rules::deadline::after(now, left) < s.deadline => {
                    s.deadline = crate::rules::deadline::after(now, left);
                    true
                }
                Some(_) => false,
                None => {
                    s.deadline = s.deadline.min(now);
                    true
                }
            }
        });
        if lost && self.lease.validity().is_zero() {
            self.lease.mark_lost(LostReason::Expired);
        }
    }
}

impl Drop for Lease {
    /// The last holder of the lease is gone (its guard marks it released before): every
    /// signal still waiting hears of it.
    fn drop(&mut self) {
        self.status.modify(|s| {
            let first = s.lost.is_none();
            if first {
                s.lost = Some(LostReason::Released);
            }
            first
        });
    }
}

impl Held for Lease {
    fn shut_down(&self) -> Option<ShutDownLock> {
        if self.state().lost == Some(LostReason::Detached) {
            // Handed on as a ticket: whoever adopts it answers for its release.
            return None;
        }
        if let Some(extender) = self
            .extender
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            extender.abort();
        }
        self.mark_lost(LostReason::ShutDown);
        Some(ShutDownLock {
            ensemble: Arc::clone(&self.ensemble),
            keys: Arc::clone(&self.keys),
            token: Arc::clone(&self.token),
            gate: Arc::clone(&self.gate),
            access: self.access,
        })
    }
}

/// Fires when a lock can no longer be assumed held: its validity deadline passed without a
/// successful extension, an extension found a majority without our token, or it was
/// released.
///
/// Cheap to clone; every clone observes the same lock. It is a local judgement: it fires
/// at the latest when the validity runs out, which is before any other client can acquire
/// the lock (unless clocks misbehave; see the crate's safety notes). It cannot fire
/// earlier than the facts allow: a node pause that keeps the keys in place is not a loss.
#[derive(Debug, Clone)]
pub struct LostSignal {
    status: Arc<Status>,
}

impl LostSignal {
    /// Completes with the reason once the lock is lost; immediately if it already is.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses nothing; wait again any time.
    pub async fn lost(&self) -> LostReason {
        loop {
            let changed = self.status.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let s = self.status.get();
            if let Some(reason) = s.lost {
                return reason;
            }
            if Instant::now() >= s.deadline {
                return LostReason::Expired;
            }
            tokio::select! {
                // The deadline may have moved meanwhile; the loop re-reads it.
                () = tokio::time::sleep_until(s.deadline) => {}
                () = changed => {}
            }
        }
    }

    /// Completes when the lock is at risk: an extension failed (the nodes refused, timed
    /// out or were quarantined) while the lock is still held, with the validity that
    /// remained then; this comes before [`lost`](Self::lost), which fires only when too
    /// little validity is left for another try. Completes with `Duration::ZERO` if the lock
    /// is lost (or released) without having been at risk first. A successful extension
    /// clears the risk; wait again to hear of the next one.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses nothing.
    pub async fn at_risk(&self) -> Duration {
        loop {
            let changed = self.status.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let s = self.status.get();
            if let Some(remaining) = s.at_risk {
                return remaining;
            }
            if s.lost.is_some() || Instant::now() >= s.deadline {
                return Duration::ZERO;
            }
            tokio::select! {
                () = tokio::time::sleep_until(s.deadline) => {}
                () = changed => {}
            }
        }
    }

    /// Whether the lock is lost now.
    pub fn is_lost(&self) -> bool {
        let s = self.status.get();
        s.lost.is_some() || Instant::now() >= s.deadline
    }

    /// Remaining validity as last known, zero once lost.
    pub fn validity(&self) -> Duration {
        let s = self.status.get();
        if s.lost.is_some() {
            return Duration::ZERO;
        }
        s.deadline.saturating_duration_since(Instant::now())
    }
}

/// What code running under [`LockRequest::run`](crate::LockRequest::run) can see of its lock.
#[derive(Debug, Clone)]
pub struct LockContext {
    lease: Arc<Lease>,
}

impl LockContext {
    pub(crate) fn new(lease: Arc<Lease>) -> Self {
        LockContext { lease }
    }

    /// Remaining validity: how long the lock is certainly held without a further extension.
    pub fn validity(&self) -> Duration {
        self.lease.validity()
    }

    /// The lost-lock signal, to pass along or `select!` on.
    pub fn lost_signal(&self) -> LostSignal {
        self.lease.signal()
    }

    /// The value stored on the nodes: the random token, then the holder description (see
    /// [`LockGuard::token`](crate::LockGuard::token)).
    pub fn token(&self) -> &str {
        &self.lease.token
    }

    /// The resources held, sorted.
    pub fn resources(&self) -> &[String] {
        &self.lease.resources
    }
}
