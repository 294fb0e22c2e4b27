//! The first start of a new ensemble, declared by its operator. Restart quarantine lets a
//! new ensemble's nodes vote at once only when every configured node answers with no
//! record and no marker: with a node down, a new ensemble cannot be told from one whose
//! majority lost the records of a live lock, so its nodes wait out the TTL ceiling. An
//! operator who knows the nodes never served a lock says so once
//! ([`Redlock::declare_new`](crate::Redlock::declare_new), `quorum-lock init`): every
//! node reached gets the marker of its current life, so it votes at once, and the nodes
//! not reached are readmitted later as any node that lost its memory (their quarantine
//! is then short: the record is read from an intact majority).

use std::sync::Arc;

use redis::Value;

use crate::acquire::ballot;
use crate::acquire::first_contact;
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::net::answers::{self, Stop};
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::protocol::keys::{self, Global};
use crate::protocol::scripts;
use crate::report::{NodeOutcome, NodeReport};
use crate::rules::safety;

/// What [`Redlock::declare_new`](crate::Redlock::declare_new) found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FirstStart {
    /// No node reached had ever been admitted: each of `admitted` now is, in its current
    /// life, and votes at once; `unreachable` (a minority) are readmitted by restart
    /// quarantine once they answer.
    Declared {
        /// The nodes admitted, as `host:port`.
        admitted: Vec<String>,
        /// The nodes that did not answer, with why.
        unreachable: Vec<(String, String)>,
    },
    /// A node reached carries a marker: the ensemble has served locks, and nothing was
    /// written (restart quarantine readmits its other nodes; `quorum-lock repair`).
    InService {
        /// The nodes that carry a marker.
        marked: Vec<String>,
    },
}

/// Declares the ensemble new: see [`FirstStart`]. Needs a majority of nodes reached with
/// their identity (`INFO`); waits until each has run for a second, as a new ensemble's
/// nodes do before they vote.
pub(crate) async fn declare_new(ensemble: &Arc<Ensemble>) -> Result<FirstStart> {
    ensemble.check_open()?;
    if ensemble.config.slotted {
        return Err(Error::Config(
            "a Cluster member keeps a marker per slot and cannot be declared new; its \
             shards are admitted by restart quarantine"
                .into(),
        ));
    }
    let report = first_contact::ping_every_node(ensemble).await.0;
    if let Some(err) = ensemble.same_server() {
        return Err(err);
    }
    let reached: Vec<usize> = (0..ensemble.nodes.len())
        .filter(|&i| is_reached(ensemble, &report, i))
        .collect();
    if reached.len() < ensemble.quorum {
        return Err(Error::Unavailable {
            quorum: ensemble.quorum,
            report,
        });
    }
    let marked = marked_nodes(ensemble, &reached).await?;
    if !marked.is_empty() {
        return Ok(FirstStart::InService { marked });
    }
    wait_for_age(ensemble, &reached).await;
    let admitted = mark_new(ensemble, &reached).await?;
    let unreachable = (report.results().iter())
        .enumerate()
        .filter(|(i, _)| !reached.contains(i))
        .map(|(_, r)| (r.node.clone(), r.outcome.to_string()))
        .collect();
    Ok(FirstStart::Declared {
        admitted,
        unreachable,
    })
}

/// Whether node `i` answered the ping and this client knows its life and age.
fn is_reached(ensemble: &Ensemble, report: &NodeReport, i: usize) -> bool {
    let answered = (report.results().get(i)).is_some_and(|r| r.outcome == NodeOutcome::Reachable);
    answered
        && (ensemble.nodes.get(i)).is_some_and(|node| {
            node.known()
                .with_facts(|facts| facts.is_some_and(|f| f.run_id.is_some() && f.uptime.is_some()))
        })
}

/// The nodes among `reached` whose marker `GET` found one; an error when one of them did
/// not answer the read (its marker is then unknown).
async fn marked_nodes(ensemble: &Ensemble, reached: &[usize]) -> Result<Vec<String>> {
    let mut get = redis::cmd("GET");
    get.arg(keys::global(
        &ensemble.config.key_prefix,
        Global::Marker,
        "",
    ));
    let get = Arc::new(Call::new(get).repeatable());
    let mut round = Round::each(ensemble.round_scope(), reached.iter().copied(), |_| &get);
    let collected = answers::collect(
        &ensemble.nodes,
        &mut round,
        |_, marker| match marker {
            Value::Nil => NodeOutcome::NotHeld,
            _ => NodeOutcome::Reachable,
        },
        |_| false,
        Stop::AtEnd,
    )
    .await;
    all_answered(ensemble, reached, &collected.outcomes)?;
    Ok((reached.iter())
        .filter(|&&i| collected.outcomes[i].0 == NodeOutcome::Reachable)
        .map(|&i| ensemble.nodes[i].name().to_owned())
        .collect())
}

/// Sleeps until every node of `reached` has run for [`safety::MIN_QUARANTINE`].
async fn wait_for_age(ensemble: &Ensemble, reached: &[usize]) {
    let ages = reached.iter().filter_map(|&i| {
        ensemble.nodes[i].known().with_facts(|facts| {
            let facts = facts?;
            Some(ballot::aged(facts.uptime?, facts.at.elapsed()).min_age())
        })
    });
    let wait = safety::first_contact_wait(ages);
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
}

/// Writes each node of `reached` the marker of the life this client learnt (where none is
/// yet); returns the nodes that carry one now.
async fn mark_new(ensemble: &Ensemble, reached: &[usize]) -> Result<Vec<String>> {
    let space = ensemble.config.space();
    let calls: Vec<(usize, Arc<Call>)> = (reached.iter())
        .filter_map(|&i| {
            let life = ensemble.nodes[i].known().run_id()?;
            Some((
                i,
                Arc::new(Call::script(&scripts::MARK_NEW, space, &[]).arg(&*life)),
            ))
        })
        .collect();
    let mut round = Round::pairs(ensemble.round_scope(), &calls);
    let collected = answers::collect(
        &ensemble.nodes,
        &mut round,
        |_, _| NodeOutcome::Reachable,
        |_| false,
        Stop::AtEnd,
    )
    .await;
    all_answered(ensemble, reached, &collected.outcomes)?;
    Ok((reached.iter())
        .map(|&i| ensemble.nodes[i].name().to_owned())
        .collect())
}

/// An error when a node of `reached` gave no answer in `outcomes` (a refusal, a timeout).
fn all_answered(
    ensemble: &Ensemble,
    reached: &[usize],
    outcomes: &[(NodeOutcome, std::time::Duration)],
) -> Result<()> {
    let answered = |i: usize| {
        matches!(
            outcomes.get(i).map(|o| &o.0),
            Some(NodeOutcome::Reachable | NodeOutcome::NotHeld)
        )
    };
    if reached.iter().all(|&i| answered(i)) {
        return Ok(());
    }
    let report = answers::report(&ensemble.nodes, outcomes);
    if report.denials() > 0 {
        return Err(Error::Permission { report });
    }
    Err(Error::Unavailable {
        quorum: ensemble.quorum,
        report,
    })
}
