//! Readmission without lock traffic: restart quarantine readmits a node only when an
//! acquisition reads it, so an idle ensemble would never heal.
//! [`Redlock::heal`](crate::Redlock::heal) runs that acquisition on a private resource of
//! its own (one attempt, released at once), and a long-lived client runs it by itself in
//! the background whenever a node it knows is not admitted in its current life: at
//! connect, after a restart it sees, and when a quarantine it waits for ends.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::acquire::attempt;
use crate::acquire::first_contact;
use crate::acquire::plan::Plan;
use crate::ensemble::Ensemble;
use crate::error::Result;
use crate::net::node::Node;
use crate::protocol::keys;
use crate::report::{NodeOutcome, NodeReport, NodeResult, QuarantineReason};

/// How often an idle long-lived client checks that its nodes still answer (a `PING`
/// each), so that it sees a restart without lock traffic.
const IDLE_CHECK: Duration = Duration::from_secs(5);

/// How long a client must have made no attempt before the background readmission probes:
/// a busy client's own attempts readmit nodes as they go.
const QUIET: Duration = Duration::from_secs(1);

/// The shortest and longest pause between two readmission rounds while a node waits.
const SHORTEST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// Where each node stands for restart quarantine, as
/// [`Redlock::heal`](crate::Redlock::heal) found it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Readiness {
    /// One entry per configured node, in configuration order.
    pub nodes: Vec<NodeReadiness>,
    /// The live locks that one more node restart could take from their holders: held on a
    /// majority, but not on enough nodes that any one of them may restart (its holder
    /// writes its copy back at its next extension; see
    /// [`LockGuard::extend`](crate::LockGuard::extend)). Read by
    /// [`Redlock::heal`](crate::Redlock::heal) once every node is admitted; empty before.
    pub locks_at_risk: Vec<LockAtRisk>,
    /// Why some locks could not be checked (a key scan refused or cut at its bound, a
    /// Cluster member), when so; the check covers the rest.
    pub locks_unchecked: Option<String>,
}

/// A live lock that the restart of one of the nodes holding it would take from its holder
/// (see [`Readiness::locks_at_risk`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockAtRisk {
    /// The lock: its resource name, or the semaphore and slot of a permit, or the
    /// read-write lock of a reader.
    pub lock: String,
    /// The nodes that hold the holder's copy.
    pub copies: usize,
    /// The copies it needs: one more than a majority (every node, for one or two nodes).
    pub needed: usize,
    /// When its longest-lived copy expires unless its holder extends it.
    pub expires_in: Duration,
}

/// One node's part in a [`Readiness`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeReadiness {
    /// The node's address as `host:port`.
    pub node: String,
    /// Where it stands.
    pub state: NodeState,
}

/// Whether a node votes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeState {
    /// Its marker names its current life: its yes counts.
    Admitted,
    /// Restart quarantine keeps its yes out: why, and how long until it votes (when known).
    KeptOut {
        /// Why.
        reason: QuarantineReason,
        /// Time left, from the check; `None` when it waits for something else.
        remaining: Option<Duration>,
    },
    /// It did not answer (down, partitioned, refused the connection).
    Unreachable(String),
}

impl Readiness {
    /// Whether every configured node is admitted and no live lock is at risk
    /// ([`locks_at_risk`](Self::locks_at_risk)): one node may now restart (or fail)
    /// without costing any lock its majority or any fencing token its order. An operator
    /// restarting nodes one at a time waits for this between two restarts (`quorum-lock
    /// doctor --ready`).
    pub fn is_ready(&self) -> bool {
        self.every_node_admitted() && self.locks_at_risk.is_empty()
    }

    /// Whether every configured node is admitted (whatever the locks' copies).
    pub fn every_node_admitted(&self) -> bool {
        self.nodes.iter().all(|n| n.state == NodeState::Admitted)
    }

    /// How many nodes are admitted.
    pub fn admitted(&self) -> usize {
        (self.nodes.iter())
            .filter(|n| n.state == NodeState::Admitted)
            .count()
    }

    /// How long until the next node kept out may vote: the shortest known wait, zero for
    /// a node that votes from the next round; `None` when no node kept out can vote without
    /// help (none is kept out, or only nodes whose identity `INFO` refuses).
    pub fn next_change(&self) -> Option<Duration> {
        (self.nodes.iter())
            .filter_map(|n| match n.state {
                NodeState::KeptOut {
                    reason: QuarantineReason::NoIdentity,
                    ..
                } => None,
                NodeState::KeptOut { remaining, .. } => Some(remaining.unwrap_or_default()),
                _ => None,
            })
            .min()
    }
}

/// `Redlock::heal` on an ensemble: at most two probes, the second when the first won
/// while some node's marker was still unacknowledged or only written (its yes counts from
/// the next round).
pub(crate) async fn heal_ensemble(ensemble: &Arc<Ensemble>) -> Result<Readiness> {
    let owners = shard_owners(ensemble).await;
    let mut readiness = readiness(ensemble, &owners, &reach(ensemble).await?);
    for _ in 0..2 {
        // A probe helps only a node that answers and would vote from the next round.
        if readiness.next_change() != Some(Duration::ZERO) {
            break;
        }
        readiness = self::readiness(ensemble, &owners, &probe(ensemble, &owners).await?);
    }
    Ok(readiness)
}

/// Per member, when it is a Redis Cluster, each master that owns a slot and the first
/// slot it owns; `None` for any other member.
type ShardOwners = Vec<Option<Vec<(Arc<Node>, u16)>>>;

/// The [`ShardOwners`] of `ensemble`'s members.
async fn shard_owners(ensemble: &Ensemble) -> ShardOwners {
    let asked = (0..ensemble.nodes.len()).map(|i| ensemble.cluster_owner_slots(i));
    futures::future::join_all(asked).await
}

/// Pings every node, twice for those that did not answer the first time (a connection
/// broken by a restart is replaced by the first ping and used by the second).
async fn reach(ensemble: &Ensemble) -> Result<NodeReport> {
    let mut report = NodeReport::default();
    for _ in 0..2 {
        report = first_contact::ping_every_node(ensemble).await.0;
        if let Some(err) = ensemble.same_server() {
            return Err(err);
        }
        if report.count(&NodeOutcome::Reachable) == report.results().len() {
            break;
        }
    }
    Ok(report)
}

/// Acquisition attempts on private resources, released at once: they mark the nodes whose
/// quarantine is over and confirm them. One attempt, or with a Cluster member one in a
/// slot of each of its masters (a Cluster member's markers are per slot: always the same
/// slot per master, so that probes leave bookkeeping in no other). Returns, per member,
/// the least favourable outcome any attempt saw.
async fn probe(ensemble: &Arc<Ensemble>, owners: &ShardOwners) -> Result<NodeReport> {
    let mut slots: Vec<u16> = owners.iter().flatten().flatten().map(|(_, s)| *s).collect();
    slots.sort_unstable();
    slots.dedup();
    let id = uuid::Uuid::from_bytes(rand::random::<[u8; 16]>()).simple();
    let resources = match slots.is_empty() {
        true => vec![keys::probe_resource(&id.to_string())],
        false => (slots.iter())
            .map(|&slot| keys::probe_resource_in(slot, &id.to_string()))
            .collect(),
    };
    let attempts = resources.into_iter().map(|r| probe_on(ensemble, r));
    let reports = futures::future::try_join_all(attempts).await?;
    Ok(least_favourable(&reports))
}

/// One acquisition attempt on `resource`, released at once; its per-node report.
async fn probe_on(ensemble: &Arc<Ensemble>, resource: String) -> Result<NodeReport> {
    let plan =
        Plan::new(ensemble, vec![resource], probe_ttl(ensemble), false)?.reading_every_answer();
    let ensemble = &ensemble.seated(&plan.keys).await;
    Ok(match attempt::attempt(ensemble, &plan, None).await {
        Ok(guard) => {
            let report = guard.report().clone();
            // Best effort: the TTL frees it otherwise.
            let _ = guard.release().await;
            report
        }
        Err(e) => e.report().cloned().unwrap_or_default(),
    })
}

/// Per node, the least favourable result of `reports`: a failure before a quarantine, the
/// longer quarantine before the shorter, either before a vote.
fn least_favourable(reports: &[NodeReport]) -> NodeReport {
    let rank = |r: &NodeResult| match &r.outcome {
        o if o.is_failure() => (2, Duration::MAX),
        NodeOutcome::Quarantined { remaining, .. } => (1, remaining.unwrap_or(Duration::MAX)),
        _ => (0, Duration::ZERO),
    };
    let mut worst: Vec<NodeResult> = Vec::new();
    for report in reports {
        for (i, result) in report.results().iter().enumerate() {
            match worst.get_mut(i) {
                Some(kept) if rank(result) > rank(kept) => *kept = result.clone(),
                Some(_) => {}
                None => worst.push(result.clone()),
            }
        }
    }
    NodeReport::new(worst)
}

/// The probe's TTL: long enough to be valid after a node timeout, at most the ceiling.
fn probe_ttl(ensemble: &Ensemble) -> Duration {
    let config = &ensemble.config;
    config
        .node_timeout
        .saturating_mul(4)
        .max(Duration::from_secs(1))
        .min(config.ttl_ceiling)
}

/// Where each node stands, from what this client knows of it and `report`, the last round
/// that reached the nodes. A Cluster member is admitted once each master that owns a slot
/// (`owners`) is known admitted in its current life.
fn readiness(ensemble: &Ensemble, owners: &ShardOwners, report: &NodeReport) -> Readiness {
    let outcomes = (report.results().iter().map(|r| &r.outcome))
        .chain(std::iter::repeat(&NodeOutcome::Pending));
    let nodes = (ensemble.nodes.iter().zip(outcomes).enumerate())
        .map(|(i, (node, outcome))| {
            let admitted = match owners.get(i).and_then(Option::as_ref) {
                Some(shards) => {
                    !shards.is_empty() && shards.iter().all(|(n, _)| n.known().is_admitted())
                }
                None => node.known().is_admitted(),
            };
            let state = match outcome {
                _ if admitted => NodeState::Admitted,
                NodeOutcome::Quarantined { reason, remaining } => NodeState::KeptOut {
                    reason: *reason,
                    remaining: *remaining,
                },
                // It answered, yet this client does not know its identity: `INFO` refused.
                NodeOutcome::Reachable if node.known().run_id().is_none() => NodeState::KeptOut {
                    reason: QuarantineReason::NoIdentity,
                    remaining: None,
                },
                NodeOutcome::Acquired | NodeOutcome::Released | NodeOutcome::Reachable => {
                    NodeState::KeptOut {
                        reason: QuarantineReason::Readmitting,
                        remaining: None,
                    }
                }
                other => NodeState::Unreachable(other.to_string()),
            };
            NodeReadiness {
                node: node.name().to_owned(),
                state,
            }
        })
        .collect();
    Readiness {
        nodes,
        locks_at_risk: Vec::new(),
        locks_unchecked: None,
    }
}

/// Whether a background probe can readmit anything: some node or Cluster master this
/// client knows is not admitted in its current life. An idle client whose nodes are all
/// admitted only pings them.
async fn probe_helps(ensemble: &Ensemble) -> bool {
    let owners = shard_owners(ensemble).await;
    (ensemble.nodes.iter().zip(&owners)).any(|(node, shards)| match shards {
        Some(shards) => shards.iter().any(|(n, _)| !n.known().is_admitted()),
        None => !node.known().is_admitted(),
    })
}

/// Starts the background readmission of a long-lived client, once, when a runtime is
/// there (restart quarantine on). It holds the client weakly and stops with
/// [`Redlock::shutdown`](crate::Redlock::shutdown) or when the last clone is dropped.
pub(crate) fn start_healer(ensemble: &Arc<Ensemble>) {
    let ensemble = ensemble.base();
    if !ensemble.config.quarantine || ensemble.life.healer_started.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        ensemble.life.healer_started.store(false, Ordering::Release);
        return;
    };
    runtime.spawn(heal_in_background(Arc::downgrade(ensemble)));
}

/// The background readmission: while a node that answers is kept out, a [`heal_ensemble`]
/// round when its quarantine should be over (between 100 ms and 5 s apart); otherwise a
/// `PING` of every node every 5 s (a node that is down costs nothing more), and a round at
/// once when a connect learns a node's facts. Only the `PING`s while no probe helps (see
/// [`probe_helps`]).
async fn heal_in_background(ensemble: Weak<Ensemble>) {
    let mut pause = Duration::ZERO;
    loop {
        let Some(woken) = ensemble.upgrade().map(|e| Arc::clone(&e.life.heal_wake)) else {
            return;
        };
        let _ = tokio::time::timeout(pause, woken.notified()).await;
        let Some(ensemble) = ensemble.upgrade() else {
            return;
        };
        if ensemble.is_closed() {
            return;
        }
        if let Some(busy) = (ensemble.since_last_attempt())
            .and_then(|since| QUIET.checked_sub(since))
            .filter(|d| !d.is_zero())
        {
            pause = busy;
            continue;
        }
        if !probe_helps(&ensemble).await {
            let _ = reach(&ensemble).await;
            pause = IDLE_CHECK;
            continue;
        }
        pause = match heal_ensemble(&ensemble).await {
            Ok(readiness) => (readiness.next_change())
                .map_or(IDLE_CHECK, |d| d.clamp(SHORTEST_PAUSE, LONGEST_PAUSE)),
            Err(_) => IDLE_CHECK,
        };
    }
}
