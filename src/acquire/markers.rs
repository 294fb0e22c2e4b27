//! Restart quarantine's markers: each answering node's admission decided once the answers
//! are in, and the markers the rules ask for, written before anything else goes to those
//! nodes and settled while a failed attempt gives its keys back.

use std::sync::Arc;

use crate::acquire::ballot::{self, Read, Seen};
use crate::acquire::plan::Plan;
use crate::acquire::vote_round::record_after;
use crate::ensemble::Ensemble;
use crate::error::Error;
use crate::net::answers::{self, Collected, Stop};
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::net::node::Node;
use crate::net::request;
use crate::protocol::{reply, scripts};
use crate::report::NodeOutcome;
use crate::rules::safety::Admission;

/// Decides every answering node's admission once the answers are in (restart quarantine
/// v2, [`ballot`]), sets the outcomes of the yes votes accordingly (kept out:
/// [`NodeOutcome::Quarantined`] with why and for how long), counts them in the metrics,
/// remembers where a node was seen admitted (the fast path), and sends the markers the
/// rules ask for before anything else is sent to those nodes (returned: in flight).
pub(super) fn decide_votes(
    ensemble: &Ensemble,
    plan: &Plan,
    reads: Vec<Option<Read>>,
    collected: &mut Collected,
) -> (Vec<Option<Read>>, Option<Marks>) {
    let config = &ensemble.config;
    let view = ballot::view(&reads);
    let mut marks = Vec::new();
    for (i, (read, node)) in reads.iter().zip(&ensemble.nodes).enumerate() {
        let Some(read) = read else { continue };
        let admission = ballot::admit(read, &view, config.drift_factor, config.ttl_ceiling);
        if read.set
            && let Some(slot) = collected.outcomes.get_mut(i)
        {
            // With quarantine off every yes counts; the marker is still kept, so that
            // other clients' quarantine sees the nodes this one admitted.
            if config.quarantine {
                slot.0 = ballot::outcome(&admission);
            }
            node.count_vote(match &slot.0 {
                NodeOutcome::Quarantined { reason, .. } => Some(reason.as_str()),
                _ => None,
            });
        }
        marks.extend(remember(node, i, read, &admission, plan.ttl_ms()));
    }
    collected.recount(NodeOutcome::is_acquired);
    let marks = send_marks(ensemble, plan, marks);
    (reads, marks)
}

/// What this client keeps of a scripted answer (the node's record, and whether it votes
/// without asking the ensemble: the fast path), or the marker its admission asks for.
fn remember(
    node: &Node,
    i: usize,
    read: &Read,
    admission: &Admission,
    ttl_ms: u64,
) -> Option<Mark> {
    let (Some(life), Seen::Read(marker)) = (&read.run_id, &read.marker) else {
        return None;
    };
    // The script raised the record to this TTL, atomically with its `SET NX`.
    let record_ms = record_after(read, ttl_ms);
    let mark = |voted| Mark {
        node: i,
        life: Arc::clone(life),
        record_ms,
        voted,
    };
    match admission {
        Admission::Votes { mark: true } => return Some(mark(true)),
        // Marked, but not cached as admitted: a later answer must show the marker current
        // before the fast path trusts this node.
        Admission::MarkOnly => return Some(mark(false)),
        Admission::Votes { .. } if marker.is_some() => node.known().seen(life, true, record_ms),
        _ => node.known().seen(life, false, record_ms),
    }
    None
}

/// Runs a failed attempt's clean-up `failure` while its marker writes are acknowledged
/// (see [`Marks`]), and returns its error. The keys go back at once: waiting for the
/// markers first kept them on every node where the attempt set them (refusing every other
/// client there) for a round trip of the slowest marked node, up to the node timeout,
/// and made each failed attempt after a restart a longer obstacle for the next. The
/// markers are queued on their connections before the release, so each node still applies
/// its marker first.
pub(super) async fn clean_up(marks: Option<Marks>, failure: impl Future<Output = Error>) -> Error {
    let ((), err) = tokio::join!(
        async {
            if let Some(marks) = marks {
                marks.settle().await;
            }
        },
        failure
    );
    err
}

/// Writes the markers that admissions asked for (on a Cluster member, those of the plan's
/// slot): each is queued on its node's connection
/// before this returns, so the fence commit that may follow finds it. See [`Marks`].
fn send_marks(ensemble: &Ensemble, plan: &Plan, marks: Vec<Mark>) -> Option<Marks> {
    if marks.is_empty() {
        return None;
    }
    let pending = marks.iter().filter_map(|mark| {
        let call =
            Call::script(&scripts::MARK, ensemble.config.space(), &plan.keys).arg(&*mark.life);
        Some(request::send(
            mark.node,
            ensemble.nodes.get(mark.node)?,
            &Arc::new(call),
        ))
    });
    let mut round = Round::new(pending, ensemble.config.node_timeout);
    round.start();
    Some(Marks {
        round,
        marks,
        nodes: ensemble.nodes.clone(),
    })
}

/// A marker to write.
struct Mark {
    /// The node's index.
    node: usize,
    /// The life the marker names.
    life: Arc<str>,
    /// The record the node holds now, in milliseconds.
    record_ms: u64,
    /// Whether the node's yes counted ([`Admission::Votes`]; not for
    /// [`Admission::MarkOnly`]), so that the written marker admits it for the fast path.
    voted: bool,
}

/// Marker writes in flight. Once a node acknowledges, this client takes the fast path
/// there. A won attempt leaves them to the background; a failed one waits for them (within
/// the node timeout) while it gives its keys back (see [`clean_up`]), so that a short-lived
/// process (the CLI) does not exit before the markers are written, leaving the next client
/// to find records without markers.
pub(super) struct Marks {
    round: Round,
    marks: Vec<Mark>,
    nodes: Vec<Arc<Node>>,
}

impl Marks {
    /// Waits for the acknowledgements and records them (bounded by the round's deadline).
    async fn settle(mut self) {
        let (nodes, marks) = (&self.nodes, &self.marks);
        answers::collect(
            nodes,
            &mut self.round,
            |i, answer| {
                let written = reply::decode::<i64>(answer).is_ok_and(|w| w == 1);
                if let (Some(mark), Some(node)) = (marks.iter().find(|m| m.node == i), nodes.get(i))
                {
                    node.known()
                        .seen(&mark.life, mark.voted && written, mark.record_ms);
                }
                NodeOutcome::Reachable
            },
            |_| false,
            Stop::AtEnd,
        )
        .await;
    }

    /// Leaves the acknowledgements to the background collector.
    pub(super) fn settle_in_background(self, ensemble: &Ensemble) {
        ensemble.background.spawn(self.settle());
    }
}
