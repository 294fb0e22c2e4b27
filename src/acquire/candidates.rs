//! What one acquisition may win, [`Candidates`]: one lock's plan (a mutex, a side of a
//! read-write lock), or the K slot plans of a semaphore, any one of which will do; and
//! [`pass`], one attempt on each candidate in turn.

use std::sync::Arc;

use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::held::guard::LockGuard;
use crate::report::NodeReport;
use crate::wait::Enqueue;
use crate::wait::queue::TurnOf;

use super::attempt;
use super::plan::Plan;

/// The plans an acquisition may win one of, with every key they hold and the sort of turn
/// the call takes among this client's tasks.
#[derive(Debug)]
pub(crate) struct Candidates<'a> {
    plans: Vec<Plan>,
    /// Every plan's keys, in plan order: what the call waits on.
    pub(super) keys: Arc<[String]>,
    pub(super) turn: TurnOf<'a>,
}

impl<'a> Candidates<'a> {
    /// One lock's plan.
    pub(crate) fn one(plan: Plan) -> Candidates<'a> {
        Candidates {
            keys: Arc::clone(&plan.keys),
            plans: vec![plan],
            turn: TurnOf::Lock,
        }
    }

    /// The slot plans of semaphore `name`, in slot order, of one key each: as many tasks of
    /// this client as the plans try at once.
    pub(crate) fn slots(plans: Vec<Plan>, name: &'a str) -> Candidates<'a> {
        let keys = plans.iter().flat_map(|p| p.keys.iter().cloned()).collect();
        let permits = u32::try_from(plans.len()).unwrap_or(u32::MAX);
        let turn = TurnOf::Permit { name, permits };
        Candidates { plans, keys, turn }
    }

    /// The first plan: a lock's only one (a writer's intent is cleared by its plan).
    pub(crate) fn first(&self) -> &Plan {
        &self.plans[0]
    }

    /// The plan holding the `index`-th of [`keys`](Self::keys).
    pub(super) fn holding_key(&self, index: usize) -> usize {
        let mut seen = 0;
        for (i, plan) in self.plans.iter().enumerate() {
            seen += plan.keys.len();
            if index < seen {
                return i;
            }
        }
        0
    }

    /// The order of one pass: only `freed` when a guard of this client just released it,
    /// else every plan from a random one on (clients spread over a semaphore's slots
    /// instead of all contending for the first).
    pub(crate) fn order(&self, freed: Option<usize>) -> impl Iterator<Item = usize> + use<> {
        let all = self.plans.len();
        let (first, count) = match freed.filter(|&i| i < all) {
            Some(only) => (only, 1),
            None if all > 1 => (rand::random_range(0..all), all),
            None => (0, all),
        };
        (0..count).map(move |step| (first + step) % all)
    }
}

/// One attempt on each of `order`'s plans, counted in `attempts`, each keeping this client
/// in the waiting lists as `enqueue` says, on the ensemble seated anew for its keys (a
/// Cluster member's slot may have a new owner; `seat` sees it before the attempt): the
/// first won with its index, else the error of the last attempt ([`Error::Contended`] when
/// every plan is held by others), or at once an error no retry mends.
pub(crate) async fn pass(
    ensemble: &Arc<Ensemble>,
    (candidates, order): (&Candidates<'_>, impl Iterator<Item = usize>),
    enqueue: Option<Enqueue<'_>>,
    attempts: &mut u32,
    mut seat: impl FnMut(&Arc<Ensemble>),
) -> Result<(usize, LockGuard)> {
    let (mut last, mut contended) = (None, None);
    for index in order {
        *attempts = attempts.saturating_add(1);
        let plan = &candidates.plans[index];
        let seated = &ensemble.seated(&plan.keys).await;
        seat(seated);
        match attempt::attempt(seated, plan, enqueue).await {
            Ok(guard) => return Ok((index, guard)),
            Err(e @ Error::Contended { .. }) => contended = Some(e),
            Err(e) if e.is_retryable() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    // A fault says more than a held plan: with every plan held, the answer is "held".
    Err(last.or(contended).unwrap_or(Error::Contended {
        report: NodeReport::default(),
    }))
}
