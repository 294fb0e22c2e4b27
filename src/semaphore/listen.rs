//! Waiting for a permit across clients: release notifications for a semaphore's slots.
//!
//! Every slot of a semaphore derives one waiting list per node, the semaphore's (see
//! `protocol::keys`), so the release of any slot pops the first client that waits for a
//! permit and wakes it, whichever slot it freed: the mutex's waking release, unchanged. A
//! task starts listening when its first pass found every slot held: it registers for every
//! slot key, waits (bounded) for the subscriptions to stand, and passes again at once. From
//! then on its attempt on the waiting-list node keeps the client in the list, and the pause
//! between passes ends at the first of a wake-up, a release by another task of this client,
//! and the poll delay (expiry announces nothing, and a message can be lost).

use std::sync::Arc;
use std::time::Duration;

use crate::ensemble::Ensemble;
use crate::metrics;
use crate::report::NodeOutcome;
use crate::wait::Enqueue;
use crate::wait::notify::{Notifier, Registration, Wake};
use crate::wait::queue::LocalReleases;
use crate::wait::state::QuickRetries;

/// How a pause between passes ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PassAgain {
    /// The task listens now: pass again at once (a release may have been announced
    /// before it listened).
    Listening,
    /// A release of some slot woke this client, or it retries quickly after a pass that
    /// followed a wake-up failed: pass again, at the head of the list.
    Woken,
    /// The waiting-list node changed: pass again, which lists the client there.
    Moved,
    /// Another task of this client gave back the slot of this index.
    FreedHere(u32),
    /// The poll delay ran out.
    Polled,
}

/// One permit acquisition's part in the release notifications.
pub(super) struct PermitListener<'a> {
    notifier: Option<&'a Arc<Notifier>>,
    slot_keys: Arc<[String]>,
    registration: Option<Registration>,
    /// A release woke this client since the last pass.
    woken: bool,
    /// The quick retries after a wake-up: the release that woke this client may reach the
    /// other nodes after the pass did.
    quick: QuickRetries,
}

impl<'a> PermitListener<'a> {
    /// Not listening yet, for the slots `slot_keys` (in slot order); never listening with
    /// notifications off.
    pub(super) fn new(ensemble: &'a Ensemble, slot_keys: Arc<[String]>) -> PermitListener<'a> {
        PermitListener {
            notifier: ensemble.notifier.as_ref(),
            slot_keys,
            registration: None,
            woken: false,
            quick: QuickRetries::new(ensemble.config.node_timeout),
        }
    }

    /// How the coming pass's attempts keep this client in the semaphore's waiting list:
    /// on the node where its subscription stands first, at the head after a wake-up, and
    /// kept there after a win while another task of this client waits. `None` until it
    /// listens.
    pub(super) fn enqueue(&mut self) -> Option<Enqueue<'a>> {
        let (registration, notifier) = (self.registration.as_mut()?, self.notifier?);
        let node = notifier.wake_node()?;
        registration.listing_on(node);
        Some(Enqueue {
            node,
            client: notifier.client_id(),
            stay: registration.shared(),
            front: self.woken,
            popped: self.woken,
            several: false,
        })
    }

    /// The pass that used `enqueue` won a slot, and `vote` is what the waiting-list node
    /// answered: where its script took the slot, it took this client off the list.
    pub(super) fn won(&mut self, enqueue: Option<Enqueue<'_>>, vote: Option<&NodeOutcome>) {
        if let (Some(registration), Some(e)) = (&mut self.registration, enqueue) {
            registration.won_with(e.node, vote);
        }
    }

    /// After a pass that won no slot, with `remaining` of the wait budget: starts
    /// listening, retries quickly after a wake-up (see [`QuickRetries`]), or waits up to
    /// `delay` for a wake-up, a release in `local`, or a change of the waiting-list node
    /// from `listed_on` (the node the pass used).
    pub(super) async fn pause(
        &mut self,
        local: LocalReleases,
        delay: Duration,
        remaining: Duration,
        listed_on: Option<usize>,
    ) -> PassAgain {
        let Some(notifier) = self.notifier else {
            return freed_or_polled(local.first_or(delay).await);
        };
        let Some(registration) = &self.registration else {
            self.registration = Some(notifier.register(&self.slot_keys));
            notifier.wait_ready(remaining).await;
            return PassAgain::Listening;
        };
        if let Some(quick) = self.quick.next_delay() {
            metrics::wait_event("quick_retry");
            tokio::time::sleep(quick.min(remaining)).await;
            return PassAgain::Woken;
        }
        self.woken = false;
        match registration.wake_or(listed_on, local.first_or(delay)).await {
            Wake::Woken => {
                self.woken = true;
                self.quick.woken();
                PassAgain::Woken
            }
            Wake::Moved => PassAgain::Moved,
            Wake::Other(freed) => freed_or_polled(freed),
        }
    }
}

/// What a wait on this client's releases found: the slot index freed, or the delay out.
fn freed_or_polled(freed: Option<usize>) -> PassAgain {
    match freed.and_then(|i| u32::try_from(i).ok()) {
        Some(slot) => PassAgain::FreedHere(slot),
        None => {
            metrics::wait_event("poll");
            PassAgain::Polled
        }
    }
}
