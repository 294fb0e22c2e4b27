//! First contact: reaching every node, and the wait before a client that knows no node
//! admitted sends its keys while a node has run for less than a second.
//!
//! A new ensemble's node votes only once it has run for
//! [`MIN_QUARANTINE`](crate::rules::safety::MIN_QUARANTINE) (`safety::fresh_once_old`).
//! An attempt sent before that would be refused, and would still leave its ensemble
//! record on the nodes that set its keys: the ensemble would no longer look new, and every
//! node would then wait out that record (the attempt's TTL) instead of a second. So a
//! client that knows no node admitted first reads every node's marker and, when none has
//! one (the ensemble never served a lock), waits until each node it reached has run for a
//! second ([`safety::first_contact_wait`]): at most a
//! second, once per node start; and such attempts of one client go one at a time. A
//! client that knows a node admitted has seen the ensemble serve, and never waits here.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use tokio::sync::MutexGuard;

use crate::acquire::ballot;
use crate::ensemble::Ensemble;
use crate::net::answers::{self, Stop};
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::net::node::Node;
use crate::net::request;
use crate::protocol::keys::{self, Global};
use crate::report::{NodeOutcome, NodeReport};
use crate::rules::{quorum, safety};

/// Before an attempt (restart quarantine on): when this client knows no node admitted in
/// its current life, takes this client's first-contact turn, reads every node's marker
/// and, when none has one (a new ensemble), waits until each node reached has run for a
/// second. The turn is returned, to be held until the attempt ends: attempts made while
/// nothing is known admitted on a new ensemble go one at a time, so that two of this
/// client's (a lock and the background readmission, or two locks) do not each leave a
/// record the other reads, which would make every node wait out that record. `None` when
/// nothing is to wait for.
///
/// # Cancel safety
/// Cancel safe: it only waits for the turn, reads the markers and sleeps.
pub(crate) async fn let_new_nodes_age<'a>(
    ensemble: &'a Ensemble,
    locks: &[String],
) -> Option<MutexGuard<'a, ()>> {
    if !ensemble.config.quarantine || knows_one_admitted(ensemble) {
        return None;
    }
    let turn = ensemble.life.first_contact.lock().await;
    // The attempt that held the turn may have admitted the nodes.
    if knows_one_admitted(ensemble) {
        return None;
    }
    if any_node_marked(ensemble, locks).await {
        return None;
    }
    wait_for_age(ensemble.nodes.iter()).await;
    Some(turn)
}

/// Sleeps until every node of `nodes` whose age this client knows has run for
/// [`safety::MIN_QUARANTINE`] (see [`safety::first_contact_wait`]).
pub(crate) async fn wait_for_age(nodes: impl Iterator<Item = &Arc<Node>>) {
    let ages = nodes.filter_map(|node| {
        node.known().with_facts(|facts| {
            let facts = facts?;
            Some(ballot::aged(facts.uptime?, facts.at.elapsed()).min_age())
        })
    });
    let wait = safety::first_contact_wait(ages);
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
}

/// The `GET` of the marker (on a Cluster member, the marker of the slot of the lock keys
/// `locks`), the read of both the first contact and the first start.
pub(crate) fn marker_read(ensemble: &Ensemble, locks: &[String]) -> Arc<Call> {
    let mut get = redis::cmd("GET");
    let space = ensemble.config.space();
    get.arg(keys::global(
        space.prefix,
        Global::Marker,
        space.tag_for(locks),
    ));
    Arc::new(Call::new(get).repeatable())
}

/// Connects to every node (if not yet connected) and reads its marker, waiting up to the
/// connect timeout plus the node timeout: whether a node that answered has one, of any
/// life (on a Cluster member, the marker of the slot of the lock keys `locks`). Then a
/// client has admitted nodes here: the ensemble has served, no attempt can find it fresh,
/// and new nodes have nothing to wait for.
async fn any_node_marked(ensemble: &Ensemble, locks: &[String]) -> bool {
    let get = marker_read(ensemble, locks);
    let pending = (ensemble.nodes.iter().enumerate()).map(|(i, node)| request::send(i, node, &get));
    let mut round = Round::new(pending, reach_timeout(ensemble));
    let marked = |_: usize, marker: Value| (NodeOutcome::Reachable, Some(marker != Value::Nil));
    let (_, reads) = answers::collect_reading(
        &ensemble.nodes,
        &mut round,
        marked,
        |o| *o == NodeOutcome::Reachable,
        |_, reads, _| reads.contains(&Some(true)),
    )
    .await;
    reads.into_iter().any(|read| read == Some(true))
}

/// A first contact's bound: a connect, then one request.
fn reach_timeout(ensemble: &Ensemble) -> Duration {
    (ensemble.nodes.first())
        .map_or(Duration::ZERO, |n| n.connect_timeout())
        .saturating_add(ensemble.config.node_timeout)
}

/// Whether this client knows a node admitted in its current life.
fn knows_one_admitted(ensemble: &Ensemble) -> bool {
    ensemble.nodes.iter().any(|node| node.known().is_admitted())
}

/// Connects to every node (if not yet connected) and sends it `PING`, waiting up to the
/// connect timeout plus the node timeout: `Reachable` for each node that answered, and
/// the votes of the round.
pub(crate) async fn ping_every_node(ensemble: &Ensemble) -> (NodeReport, Vec<quorum::Vote>) {
    let ping = Arc::new(Call::new(redis::cmd("PING")).repeatable());
    let pending =
        (ensemble.nodes.iter().enumerate()).map(|(i, node)| request::send(i, node, &ping));
    let mut round = Round::new(pending, reach_timeout(ensemble));
    let collected = answers::collect(
        &ensemble.nodes,
        &mut round,
        |_, _| NodeOutcome::Reachable,
        |o| *o == NodeOutcome::Reachable,
        Stop::AtEnd,
    )
    .await;
    let votes = quorum::votes(&collected.outcomes, &NodeOutcome::Reachable);
    (collected.report(&ensemble.nodes), votes)
}
