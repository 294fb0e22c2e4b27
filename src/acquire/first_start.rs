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

use crate::acquire::first_contact;
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::net::answers;
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::protocol::scripts;
use crate::report::{NodeOutcome, NodeReport};

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
    let get = first_contact::marker_read(ensemble, &[]);
    let mut round = Round::each(ensemble.round_scope(), reached.iter().copied(), |_| &get);
    let report =
        answers::report_every_answer(&ensemble.nodes, &mut round, |_, marker| match marker {
            Value::Nil => NodeOutcome::NotHeld,
            _ => NodeOutcome::Reachable,
        })
        .await?;
    all_answered(ensemble, reached, &report)?;
    Ok((reached.iter())
        .filter_map(|&i| report.results().get(i))
        .filter(|r| r.outcome == NodeOutcome::Reachable)
        .map(|r| r.node.clone())
        .collect())
}

/// Sleeps until every node of `reached` has run for `safety::MIN_QUARANTINE` (see
/// `first_contact::wait_for_age`).
async fn wait_for_age(ensemble: &Ensemble, reached: &[usize]) {
    let nodes = reached.iter().filter_map(|&i| ensemble.nodes.get(i));
    first_contact::wait_for_age(nodes).await;
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
    let report =
        answers::report_every_answer(&ensemble.nodes, &mut round, |_, _| NodeOutcome::Reachable)
            .await?;
    all_answered(ensemble, reached, &report)?;
    Ok((reached.iter())
        .filter_map(|&i| ensemble.nodes.get(i))
        .map(|node| node.name().to_owned())
        .collect())
}

/// An error when a node of `reached` gave no answer in `report` (a timeout, a failure; an
/// ACL's refusal is already [`Error::Permission`], see `answers::report_every_answer`).
fn all_answered(ensemble: &Ensemble, reached: &[usize], report: &NodeReport) -> Result<()> {
    let answered = |i: usize| {
        matches!(
            report.results().get(i).map(|r| &r.outcome),
            Some(NodeOutcome::Reachable | NodeOutcome::NotHeld)
        )
    };
    if reached.iter().all(|&i| answered(i)) {
        return Ok(());
    }
    Err(Error::Unavailable {
        quorum: ensemble.quorum,
        report: report.clone(),
    })
}
