//! The waiting protocol: how a `lock()` call that finds the keys held waits for them
//! without polling Redis in a herd, and how a release hands them on.
//!
//! - [`state`]: the pure state between attempts (gate, head of the list, quick retries)
//!   and what a failure leads to, table-tested;
//! - [`queue`]: the local first-come first-served queue of this client's tasks, and the
//!   local hand-off;
//! - [`read_holds`]: which of this client's tasks hold read locks (a task may not ask
//!   for the write lock of a name it reads);
//! - [`notify`]: release notifications (one pub/sub subscription per node) and the
//!   waiting lists on the nodes.
//!
//! The acquire loop sees it through one narrow interface, [`Waiting`]: what the next
//! attempt is ([`Waiting::next`], [`Waiting::ask_gate`]), what a win or a failure means for
//! the lists ([`Waiting::acquired`], [`Waiting::pause`]). An attempt sees only an
//! [`Enqueue`], a release only a [`Requeue`].

pub(crate) mod notify;
pub(crate) mod queue;
pub(crate) mod read_holds;
pub(crate) mod state;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::metrics;
use crate::net::answers::{self, Stop};
use crate::net::call::Call;
use crate::net::fanout::{Round, RoundScope};
use crate::protocol::keys::Space;
use crate::protocol::{reply, scripts};
use crate::report::NodeOutcome;
use notify::{Notifier, Registration, Wake};
use queue::{HeldTurn, LocalQueue, LocalReleases, TurnOf};
use state::{AfterFailure, WaitState};

/// How an attempt keeps this client in the waiting list of the keys (see
/// [`scripts::ACQUIRE`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Enqueue<'a> {
    /// The node whose waiting list we join.
    pub(crate) node: usize,
    /// Our client id in waiting lists.
    pub(crate) client: &'a str,
    /// Stay listed after success: other tasks of this client wait for the keys.
    pub(crate) stay: bool,
    /// Rejoin at the head after failure: a release woke us and someone overtook us.
    pub(crate) front: bool,
    /// The attempt straight after a wake-up: the release that woke us popped our entry.
    /// (A quick retry after a failed one is `front` too, but that failure's clean-up put
    /// the entry back at the head.)
    pub(crate) popped: bool,
    /// The lock has several keys: a release of one of them took us off its list only.
    pub(crate) several: bool,
}

impl<'a> Enqueue<'a> {
    /// Whether the attempt keeps the list by the acquire script on the waiting-list node.
    /// Not for the attempt right after a wake-up (`popped`) on one key while no other task
    /// of the client waits (`stay`): the release that woke it popped it from the list, so
    /// on success there is no entry to remove and a plain `SET` does (the fast path's one
    /// command instead of a script and its calls); on failure the clean-up puts it back at
    /// the head ([`Requeue::unlisted`]), so every later attempt lists, and its success
    /// takes the entry off again. With several keys, the release of one of them popped
    /// only that key's list: the others still hold us.
    pub(crate) fn lists(self) -> bool {
        !self.popped || self.stay || self.several
    }

    /// How a failed attempt's clean-up puts this client back in the waiting list: where the
    /// attempt's `SET` succeeded on the waiting-list node, the acquire script took the
    /// client off that list, and a client that still waits must be on it to be woken.
    pub(crate) fn requeue(self, list_ttl_ms: u64) -> Requeue<'a> {
        Requeue {
            node: self.node,
            client: self.client,
            front: self.front,
            list_ttl_ms,
            unlisted: !self.lists(),
        }
    }
}

/// Where and how a failed attempt's clean-up puts its client back in the waiting list
/// (see [`scripts::RELEASE`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requeue<'a> {
    /// The waiting-list node.
    pub(crate) node: usize,
    /// The client id.
    pub(crate) client: &'a str,
    /// At the head of the list (a release woke this client), else at its tail.
    pub(crate) front: bool,
    /// The list's expiry.
    pub(crate) list_ttl_ms: u64,
    /// The attempt did not list the client (see [`Enqueue::lists`]): requeue it on the
    /// waiting-list node even where the attempt's `SET` was refused.
    pub(crate) unlisted: bool,
}

/// What the waiting protocol uses of the client: the nodes, the release notifier (when
/// notifications are on) and the local queue. Handed down by the
/// ensemble above.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    pub(crate) scope: RoundScope<'a>,
    pub(crate) notifier: Option<&'a Arc<Notifier>>,
    pub(crate) queue: &'a Arc<LocalQueue>,
    /// Where the client's names live (every derived key starts with its key prefix).
    pub(crate) space: Space<'a>,
}

/// One acquisition's part in the waiting protocol: its turn in the local queue, its
/// subscription to release notifications (once it listens) and its [`WaitState`].
///
/// It waits for one lock's keys, or for any of a semaphore's slot keys (whose releases
/// all wake the first client in the semaphore's one waiting list).
pub(crate) struct Waiting<'a> {
    cx: Context<'a>,
    /// This call's turn among the client's tasks that want these keys, held while it lasts.
    turn: HeldTurn,
    /// Every key whose release may let this call win.
    keys: &'a Arc<[String]>,
    listening: Option<Registration>,
    /// Whether this call waited for the subscriptions to stand (once at most).
    waited_ready: bool,
    state: WaitState,
}

impl<'a> Waiting<'a> {
    /// Starts waiting for `keys`: first for this call's turn among the tasks of this
    /// client that want them (first come, first served; `of` says how many at a time send
    /// attempts: one for a lock, as many as the permits for a semaphore); `None` if the
    /// turn did not come by `deadline`. The turn passes on
    /// when the returned value is dropped: the next task then waits on Redis for our
    /// release.
    ///
    /// Listens for releases from the first attempt only where these keys are known to be
    /// contended here: this client just handed them to a waiting client, or other tasks of
    /// this client wait for them (and the subscriptions already run). Otherwise the first
    /// attempt is a plain one, in no waiting list, and the call starts listening on its
    /// first failure, then tries again at once (see [`WaitState::failed`]): a lock nobody
    /// else wants never pays for the waiting lists, even once the client has listened for
    /// another lock. When this client just handed these keys to a waiting client, that
    /// client goes first: while listening, the first attempt asks the waiting-list node
    /// (where the woken client has the turn) before it is sent; otherwise this waits for a
    /// head start, at most until `deadline`. A semaphore's waiter starts plain and gets
    /// no head-start or gate: its pass is over every slot, not one lock's keys.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives back any turn already taken and leaves the queue.
    pub(crate) async fn start(
        cx: Context<'a>,
        keys: &'a Arc<[String]>,
        of: TurnOf<'_>,
        deadline: Instant,
    ) -> Option<Waiting<'a>> {
        let turn = tokio::time::timeout_at(deadline, cx.queue.take_turn(of, keys))
            .await
            .ok()?;
        let courtesy_until = match turn {
            HeldTurn::Lock { .. } => cx.queue.courtesy_until(keys),
            HeldTurn::Permit { .. } => None,
        };
        let contended = || courtesy_until.is_some() || cx.queue.has_waiters(keys);
        let listening = (cx.notifier)
            .filter(|n| n.is_started() && contended())
            .map(|n| n.register(keys));
        let mut courtesy = false;
        if let Some(until) = courtesy_until {
            if listening.is_some() {
                courtesy = true;
            } else {
                tokio::time::sleep_until(until.min(deadline)).await;
            }
        }
        Some(Waiting {
            cx,
            turn,
            keys,
            listening,
            waited_ready: false,
            state: WaitState::new(courtesy, cx.scope.timeout),
        })
    }

    /// The turn this call held, once it won: a permit keeps its own.
    pub(crate) fn into_turn(self) -> HeldTurn {
        self.turn
    }

    /// The releases by this client's guards of any of the keys held now (see
    /// [`LocalReleases`]), for a semaphore's pass. None for a lock: its call waits for a
    /// local hold before each attempt ([`for_local_release`](Self::for_local_release)).
    pub(crate) fn watch_local(&self) -> LocalReleases {
        match self.turn {
            HeldTurn::Permit { .. } => self.cx.queue.watch_releases(self.keys),
            HeldTurn::Lock { .. } => LocalReleases::none(),
        }
    }

    /// While a guard of this client holds a lock's keys, an attempt would fail: waits for
    /// its release to complete, or for the `poll` delay in case the guard was forgotten
    /// (at most `remaining`). Returns whether the poll delay ran out. A semaphore's pass
    /// goes on at once: its turn leaves it a slot that no guard of this client holds.
    pub(crate) async fn for_local_release(
        &self,
        remaining: Duration,
        poll: impl FnOnce() -> Duration,
    ) -> bool {
        if matches!(self.turn, HeldTurn::Permit { .. }) {
            return false;
        }
        let queue = self.cx.queue;
        let Some(freed) = queue.held_locally(self.keys) else {
            return false;
        };
        let notified = freed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if queue.held_locally(self.keys).is_none() || remaining.is_zero() {
            return false;
        }
        tokio::select! {
            () = &mut notified => false,
            () = tokio::time::sleep(poll().min(remaining)) => true,
        }
    }

    /// The coming attempt, the `attempt`-th of this call: how it keeps this client in the
    /// waiting list (while listening), and whether it asks the list node first.
    ///
    /// While listening, each attempt also keeps this client in the waiting list of one
    /// node, where our subscription stands (and in it after success when other local tasks
    /// wait for the same keys): a release there pops the entry and must be heard, and one
    /// list means one wake-up per release.
    pub(crate) fn next(&mut self, attempt: u32) -> (Option<Enqueue<'a>>, bool) {
        let next = self.state.next(attempt);
        let cx = self.cx;
        let one_lock = matches!(self.turn, HeldTurn::Lock { .. });
        let enqueue = match (&mut self.listening, cx.notifier) {
            (Some(registration), Some(notifier)) => notifier.wake_node().map(|node| {
                registration.listing_on(node);
                // Other tasks of this client wait for the keys: a lock's in the local queue,
                // a semaphore's listening beside this one.
                let stay = if one_lock {
                    cx.queue.has_waiters(self.keys)
                } else {
                    registration.shared()
                };
                Enqueue {
                    node,
                    client: notifier.client_id(),
                    stay,
                    front: next.front,
                    popped: next.popped,
                    // A slot lock has one key, in the semaphore's one list.
                    several: one_lock && self.keys.len() > 1,
                }
            }),
            _ => None,
        };
        (enqueue, one_lock && next.gated && enqueue.is_some())
    }

    /// Asks the waiting-list node whether this waiter, which no release woke, may try now
    /// (see [`scripts::GATE`]). Refused (a release gave another client the turn), it
    /// returns [`Error::Contended`] with that node's answer only (the others show as not
    /// asked, [`NodeOutcome::Pending`]), and the client is in the waiting list. A node that
    /// fails to answer opens the gate: the attempt then decides.
    pub(crate) async fn ask_gate(&self, e: Enqueue<'_>, list_ttl_ms: u64) -> Result<()> {
        let scope = self.cx.scope;
        let call = Call::script(&scripts::GATE, self.cx.space, self.keys)
            .arg(e.client)
            .arg(scripts::flag(e.front))
            .arg(list_ttl_ms);
        let start = Instant::now();
        let mut round = Round::broadcast(scope, call, [e.node]);
        let collected = answers::collect(
            scope.nodes,
            &mut round,
            |_, r| reply::one_or(r, NodeOutcome::Acquired, NodeOutcome::HeldByOther),
            |o| *o == NodeOutcome::Acquired,
            Stop::AtEnd,
        )
        .await;
        let refused =
            (collected.outcomes.get(e.node)).is_some_and(|(o, _)| *o == NodeOutcome::HeldByOther);
        if !refused {
            metrics::wait_event("gate_open");
            return Ok(());
        }
        metrics::wait_event("gate_refused");
        metrics::attempt("contended", start.elapsed());
        Err(Error::Contended {
            report: collected.report(scope.nodes),
        })
    }

    /// The attempt that listed this client on `enqueue`'s node won, and `vote` is what that
    /// node answered. The acquire script took us off the waiting list where it set the key.
    /// Where it did not (the majority came from the other nodes), it listed us, as may an
    /// earlier wake node: those lists are left when the registration ends, or the next
    /// release there would wake us, who no longer wait. A list node that has not answered
    /// yet is settled from its answer, in the background (`Notifier::settle`).
    pub(crate) fn acquired(&mut self, enqueue: Option<Enqueue<'_>>, vote: Option<&NodeOutcome>) {
        if let (Some(registration), Some(e)) = (&mut self.listening, enqueue) {
            registration.won_with(e.node, vote);
        }
    }

    /// Waits before the next attempt after `err`, with `remaining` of the wait budget left:
    /// starts listening (and tries again at once), retries quickly after a wake-up, or
    /// sleeps for the `poll` delay (given the extra doublings of a listed waiter) unless a
    /// release wakes this client first, or a guard of this client releases one of the keys
    /// in `local`: then returns that key's index among the waited keys.
    pub(crate) async fn pause(
        &mut self,
        err: &Error,
        enqueue: Option<Enqueue<'_>>,
        (remaining, local): (Duration, LocalReleases),
        poll: impl FnOnce(u32) -> Duration,
    ) -> Option<usize> {
        let notifier = self.cx.notifier;
        // The attempt was in no waiting list: this call does not listen yet, or no
        // subscription stood (their tasks were started again by `register`: the ones before
        // died with their runtime, say). Listen and wait for them, once per call.
        let can_listen = notifier.is_some() && enqueue.is_none() && !self.waited_ready;
        // The waiting-list node answered the gate or the attempt: we are in its list.
        let listed = enqueue.is_some_and(|e| {
            (err.report().and_then(|r| r.results().get(e.node)))
                .is_some_and(|r| !r.outcome.is_failure() && r.outcome != NodeOutcome::Pending)
        });
        match self
            .state
            .failed(can_listen, self.listening.is_some(), listed)
        {
            AfterFailure::Listen => {
                let notifier = notifier?;
                self.waited_ready = true;
                if self.listening.is_none() {
                    self.listening = Some(notifier.register(self.keys));
                }
                // A release may have been announced before we listened: once the
                // subscriptions stand, try again at once instead of sleeping.
                notifier.wait_ready(remaining).await;
                None
            }
            AfterFailure::QuickRetry { delay } => {
                // Woken, yet the attempt failed: the release that woke us comes from the
                // node that keeps the waiting list, and the same release may not have
                // reached the other nodes yet when our SET did. Retry after a moment,
                // still at the head of the list, instead of waiting for the next release.
                metrics::wait_event("quick_retry");
                tokio::time::sleep(delay.min(remaining)).await;
                None
            }
            AfterFailure::Wait { shift } => {
                let delay = poll(shift).min(remaining);
                self.wait_for_release(enqueue, local, delay).await
            }
        }
    }

    /// Sleeps for `delay` unless a release wakes this client first (while listening), or
    /// a guard of this client releases one of the keys in `local` (whose index it returns).
    /// Returns at once when the waiting-list node changed since the attempt `enqueue`
    /// described (a subscription came up or dropped), before or while it waits: releases
    /// pop the new node's list, where the next attempt lists this client.
    async fn wait_for_release(
        &mut self,
        enqueue: Option<Enqueue<'_>>,
        local: LocalReleases,
        delay: Duration,
    ) -> Option<usize> {
        let Some(registration) = &self.listening else {
            return freed_or_polled(local.first_or(delay).await);
        };
        let listed_on = enqueue.map(|e| e.node);
        match registration.wake_or(listed_on, local.first_or(delay)).await {
            Wake::Woken => {
                self.state.woken();
                None
            }
            Wake::Moved => None,
            Wake::Other(freed) => freed_or_polled(freed),
        }
    }
}

/// What a wait on this client's releases found: the index of the key freed, or, with the
/// delay out, `None` (counted as a poll).
fn freed_or_polled(freed: Option<usize>) -> Option<usize> {
    if freed.is_none() {
        metrics::wait_event("poll");
    }
    freed
}
