//! The acquire round of one attempt and its votes: which request each node gets (the plain
//! `SET NX PX` fast path or the acquire script), collecting the answers until the outcome is
//! certain, what each answer says for the ballot, and the late answers read in the
//! background.

use std::sync::Arc;

use redis::Value;

use crate::acquire::ballot::{self, Read, Seen};
use crate::acquire::plan::{Attempt, Plan};
use crate::ensemble::Ensemble;
use crate::ensemble::config::whole_ms;
use crate::held::release::Holding;
use crate::net::answers::{self, Collected, Stop};
use crate::net::call::Call;
use crate::net::fanout::{self, Round};
use crate::net::node::Node;
use crate::protocol::{keys, permit_scripts, rw_scripts};
use crate::protocol::{reply, scripts};
use crate::report::NodeOutcome;
use crate::rules::retry::RetryPolicy;
use crate::rules::safety::Persistence;
use crate::wait::Enqueue;

/// The fast path's plan (see [`acquire_round`]): per node, the life (`run_id`) it was seen
/// admitted in and the completeness its marker said, for the nodes that get the plain
/// `SET NX PX`; `None` for those that get the acquire script.
type Lives = Vec<Option<Arc<str>>>;

/// The acquire requests of one attempt: plain `SET NX PX` for one key, the all-or-nothing
/// script for several keys, to keep the waiting list or to read fencing counters. The node
/// whose waiting list this client joins gets the script.
///
/// A read-write lock's side and a semaphore's slot always get their script, which has a
/// fast path of its own with the same rule (its last argument), answering as `SET NX PX`
/// does.
///
/// The plain `SET NX PX` is the fast path, per node: for a node whose ensemble record is
/// known to cover this TTL in its current life and, with restart quarantine on, that was
/// seen admitted in that life (returned: the life per such node, which its reply then
/// counts for). The other nodes get the script, which raises the record and reads the
/// marker and the record for the ballot. The fast nodes keep the plain `SET` beside
/// scripted ones only when no scripted node has an identity yet (never connected, such
/// as a node that is down or silent: its answer cannot vote, [`ballot::mix_allowed`]);
/// otherwise every node gets the script, so that the ballot sees every node's marker and
/// record (a node that restarted is readmitted by age only with every answer read).
/// Clients with quarantine off raise the record too: other clients' quarantine protects
/// their leases as well.
pub(super) fn acquire_round<'a>(this: Attempt<'a>, holding: &Holding) -> (Requests<'a>, Lives) {
    let Attempt {
        ensemble,
        plan,
        enqueue,
    } = this;
    let ttl_ms = plan.ttl_ms();
    let token = &**holding.token();
    let lives = fast_nodes(ensemble, ttl_ms);
    let any_fast = lives.iter().any(Option::is_some);
    let any_scripted = lives.iter().any(Option::is_none);
    let call = |enqueue: Option<Enqueue<'_>>, plain: bool| match plan.access.permit_count() {
        Some(count) => {
            let prefix = ensemble.config.space();
            let enqueue = enqueue.unwrap_or_default();
            Call::script(&permit_scripts::PERMIT_ACQUIRE, prefix, &plan.keys)
                .arg(token)
                .arg(ttl_ms)
                .arg(count)
                .arg(scripts::flag(plain))
                .arg(enqueue.client)
                .arg(scripts::flag(enqueue.stay))
                .arg(scripts::flag(enqueue.front))
                .gated(holding.gate())
        }
        None => lock_call(this, holding, enqueue, plain),
    };
    let enqueue = enqueue.filter(|e| e.lists());
    if let [node] = &ensemble.nodes[..] {
        // The direct path: the one node's call, whichever it is, awaited in place.
        return (Requests::Direct(node, call(enqueue, any_fast)), lives);
    }
    let special = enqueue.map(|e| (e.node, Arc::new(call(enqueue, false))));
    // The fast nodes' `SET`, or the script when no node is fast; the script apart when mixed.
    let common = Arc::new(call(None, any_fast));
    let script = (any_fast && any_scripted).then(|| Arc::new(call(None, false)));
    let round = Round::each(ensemble.round_scope(), 0..ensemble.nodes.len(), |i| match (
        &special, &script,
    ) {
        (Some((node, special)), _) if *node == i => special,
        (_, Some(script)) if lives.get(i).is_some_and(Option::is_none) => script,
        _ => &common,
    });
    (Requests::Round(round), lives)
}

/// The acquire request of a mutex or a read-write lock's side for one node: the plain `SET
/// NX PX` where `plain` allows it (one key, not listed, no fencing), else the acquire
/// script, with the read-write lock's mode and its own fast path for a side.
fn lock_call(
    this: Attempt<'_>,
    holding: &Holding,
    enqueue: Option<Enqueue<'_>>,
    plain: bool,
) -> Call {
    let (ensemble, plan) = (this.ensemble, this.plan);
    let (ttl_ms, token) = (plan.ttl_ms(), &**holding.token());
    match (&plan.keys[..], enqueue, plan.fencing) {
        ([key], None, false) if plain && plan.access.acquires_with_plain_set() => {
            // Sized once: the six arguments and their bytes (a TTL has at most 20 digits).
            let mut cmd = redis::Cmd::with_capacity(6, key.len() + token.len() + 32);
            cmd.arg("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms);
            Call::new(cmd).gated(holding.gate())
        }
        (keys, enqueue, fencing) => {
            let enqueue = enqueue.unwrap_or_default();
            let script = match plan.access.mode() {
                None => &scripts::ACQUIRE,
                Some(_) => &rw_scripts::RW_ACQUIRE,
            };
            let call = Call::script(script, ensemble.config.space(), keys)
                .arg(token)
                .arg(ttl_ms)
                .arg(enqueue.client)
                .arg(scripts::flag(enqueue.stay))
                .arg(scripts::flag(fencing))
                .arg(scripts::flag(enqueue.front));
            match plan.access.mode() {
                None => call.gated(holding.gate()),
                // The read-write script's own fast path: no fencing counter to return.
                Some(mode) => {
                    let config = &ensemble.config;
                    let intent = (config.retry).intent_lifetime(plan.ttl, config.node_timeout);
                    let call = (call.arg(mode))
                        .arg(scripts::flag(plain && !fencing))
                        .arg(whole_ms(intent));
                    // A reader that enters on its turn hands it on to the next waiter.
                    let call = if plan.access.is_shared() && ensemble.notifier.is_some() {
                        call.arg(keys::wake_channel_prefix(&config.key_prefix))
                            .arg(whole_ms(RetryPolicy::turn_lifetime(config.node_timeout)))
                    } else {
                        call
                    };
                    call.gated(holding.gate())
                }
            }
        }
    }
}

/// Per node, the life it takes the plain `SET NX PX` in (see [`acquire_round`]), or
/// `None` for the acquire script.
fn fast_nodes(ensemble: &Ensemble, ttl_ms: u64) -> Lives {
    if ensemble.config.slotted {
        // With a Cluster member the record and the marker are per slot, and what this
        // client saw of them in one slot says nothing of another: every node gets the
        // script, which reads the slot's own.
        return vec![None; ensemble.nodes.len()];
    }
    let quarantine = ensemble.config.quarantine;
    let mut lives: Lives = (ensemble.nodes.iter())
        .map(|n| n.known().fast_path(ttl_ms, quarantine))
        .collect();
    if lives.iter().all(Option::is_some) {
        return lives;
    }
    let nodes = (ensemble.nodes.iter().zip(&lives))
        .map(|(node, life)| (life.is_some(), node.known().run_id().is_some()));
    if !ballot::mix_allowed(nodes) {
        lives.fill(None);
    }
    lives
}

/// An attempt's acquire requests: a round over several nodes, or, with a single node, its
/// call alone, sent and awaited in place by [`collect_votes`] (see [`fanout::direct`]).
pub(super) enum Requests<'a> {
    Round(Round),
    Direct(&'a Arc<Node>, Call),
}

/// Waits for the acquire replies of one attempt until its outcome is certain (see
/// [`ballot::settled`]), keeping what each node said for the ballot. `lives`: the fast
/// path's plan, the life each node that got the plain `SET NX PX` was seen admitted in
/// and its completeness.
/// Outcomes of yes votes are provisional ([`NodeOutcome::Acquired`]) until
/// [`decide_votes`](super::markers::decide_votes) judges them on every answer. Returns
/// what each node said for the ballot, and the round with what is still in flight (none
/// on the direct path).
pub(super) async fn collect_votes(
    ensemble: &Ensemble,
    plan: &Plan,
    requests: Requests<'_>,
    lives: &[Option<Arc<str>>],
) -> (Collected, Vec<Option<Read>>, Option<Round>) {
    let quarantine = ensemble.config.quarantine;
    // A yes is provisional until the ballot has every answer (`decide_votes`); a refusal
    // and a failure are final.
    let read = |i: usize, answer: Value| {
        let Some(node) = ensemble.nodes.get(i) else {
            return (NodeOutcome::Failed("no such node".into()), None);
        };
        let (vouched, life) = (ensemble.vouches(i), lives.get(i).and_then(Option::as_ref));
        match read_vote(node, vouched, answer, life) {
            Ok(read) if read.set => (NodeOutcome::Acquired, Some(read)),
            Ok(read) => (NodeOutcome::HeldByOther, Some(read)),
            Err(failed) => (failed, None),
        }
    };
    match requests {
        Requests::Direct(node, call) => {
            let answer = fanout::direct(node, &call, ensemble.config.node_timeout).await;
            let (collected, reads) = answers::collected_one_reading(
                &ensemble.nodes,
                0,
                answer,
                read,
                NodeOutcome::is_acquired,
            );
            (collected, reads, None)
        }
        Requests::Round(mut round) => {
            let (collected, reads) = answers::collect_reading(
                &ensemble.nodes,
                &mut round,
                read,
                NodeOutcome::is_acquired,
                |outcomes, reads, _| {
                    let pending = outcomes
                        .iter()
                        .filter(|(o, _)| *o == NodeOutcome::Pending)
                        .count();
                    let settled = ballot::settled(reads, pending, ensemble.quorum, quarantine);
                    settled && (pending == 0 || !plan.every_answer)
                },
            )
            .await;
            (collected, reads, Some(round))
        }
    }
}

/// What one acquire reply says for the ballot: a plain `SET NX PX` (`OK` or nil) or the
/// acquire script's reply, with the facts the node's connect learnt.
fn read_vote(
    node: &Node,
    vouched: bool,
    answer: Value,
    life: Option<&Arc<str>>,
) -> std::result::Result<Read, NodeOutcome> {
    let mut read = blank_read(node, vouched);
    if let Some(life) = life {
        read.marker = Seen::Cached(Arc::clone(life));
    }
    match answer {
        Value::Okay => read.set = true,
        Value::Nil => {}
        answer => {
            let got = reply::acquire_reply(answer)?;
            read.set = got.set;
            read.marker = Seen::Read(got.marker.map(|m| m.life));
            read.record_ms = got.record_ms;
            read.fence = got.fence;
        }
    }
    Ok(read)
}

/// What the ballot of an acquisition knows of `node` before its reply: its `run_id`, its
/// age now (rounded down) and its durability, from what its last connect learnt. A node
/// its membership does not vouch for (`vouched`, see `Ensemble::vouches`: a Sentinel or
/// Cluster member whose master was not confirmed lately) has no identity: its vote does
/// not count.
pub(crate) fn blank_read(node: &Node, vouched: bool) -> Read {
    if !vouched {
        return Read::blank(None, None, Persistence::Unknown);
    }
    node.known().with_facts(|facts| match facts {
        None => Read::blank(None, None, Persistence::Unknown),
        Some(facts) => {
            let uptime = facts.uptime.map(|u| ballot::aged(u, facts.at.elapsed()));
            Read::blank(facts.run_id.clone(), uptime, facts.persistence)
        }
    })
}

/// Reads, in the background, the acquire script's answers that come after the decision
/// from nodes this client does not yet know to hold an ensemble record covering the TTL:
/// each such answer says the script raised the node's record to this TTL in its current
/// life, which is what the plain `SET NX PX` fast path needs to know of every node (with
/// quarantine on, it also needs the node seen admitted, which only a ballot decides).
/// Without this, a node that always answers after the majority (a slow one) would keep
/// every later attempt of this client on the script, on every node. One reader per node at
/// a time: a node that never answers (a silent one) costs one reader per node timeout, not
/// one per attempt. The rest of the round finishes in the background as usual.
pub(super) fn read_late_records(ensemble: &Ensemble, plan: &Plan, mut round: Round) {
    let ttl_ms = plan.ttl_ms();
    for (i, node) in ensemble.nodes.iter().enumerate() {
        if node.known().fast_path(ttl_ms, false).is_some() {
            continue;
        }
        let Some(claim) = node.claim_reading_late() else {
            continue;
        };
        // Answered before the decision (read by then) or not sent: nothing late to read,
        // and the claim goes back as it drops.
        let Some(mut late) = round.take(i) else {
            continue;
        };
        let nodes = ensemble.nodes.clone();
        ensemble.background.spawn(async move {
            let node = claim.node();
            answers::collect(
                &nodes,
                &mut late,
                |_, answer| {
                    // Only the record is read here, for the fast path: no vote.
                    if let Ok(read) = read_vote(node, true, answer, None)
                        && let Some(life) = &read.run_id
                    {
                        node.known().seen(life, false, record_after(&read, ttl_ms));
                    }
                    NodeOutcome::Reachable
                },
                |_| false,
                Stop::AtEnd,
            )
            .await;
        });
    }
    round.finish_in_background(ensemble.round_scope());
}

/// The ensemble record a node holds after the acquire script read `read` for a TTL of
/// `ttl_ms`: the script raises the record to the TTL (never lowers it) before anything else.
pub(super) fn record_after(read: &Read, ttl_ms: u64) -> u64 {
    read.record_ms.unwrap_or(0).max(ttl_ms)
}
