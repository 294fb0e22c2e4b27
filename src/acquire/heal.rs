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
use crate::protocol::keys;
use crate::report::{NodeOutcome, NodeReport, QuarantineReason};

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
    let mut readiness = readiness(ensemble, &reach(ensemble).await?);
    for _ in 0..2 {
        // A probe helps only a node that answers and would vote from the next round.
        if readiness.next_change() != Some(Duration::ZERO) {
            break;
        }
        readiness = self::readiness(ensemble, &probe(ensemble).await?);
    }
    Ok(readiness)
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

/// One acquisition attempt on a private resource, released at once: it marks the nodes
/// whose quarantine is over and confirms them. Returns its per-node report.
async fn probe(ensemble: &Arc<Ensemble>) -> Result<NodeReport> {
    let id = uuid::Uuid::from_bytes(rand::random::<[u8; 16]>()).simple();
    let resource = keys::probe_resource(&id.to_string());
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
/// that reached the nodes.
fn readiness(ensemble: &Ensemble, report: &NodeReport) -> Readiness {
    let outcomes = (report.results().iter().map(|r| &r.outcome))
        .chain(std::iter::repeat(&NodeOutcome::Pending));
    let nodes = (ensemble.nodes.iter().zip(outcomes))
        .map(|(node, outcome)| {
            let state = match outcome {
                _ if node.known().is_admitted() => NodeState::Admitted,
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

/// Whether a background probe can readmit anything in an ensemble with a Redis Cluster
/// member: a member other than a Redis Cluster is not known admitted in its current life. A Cluster member's markers are per slot: it is
/// never known admitted as a whole, and a probe readmits one random slot (leaving that
/// slot's bookkeeping keys); its attempts readmit their own slots as they go.
fn probe_helps(ensemble: &Ensemble) -> bool {
    (ensemble.nodes.iter().enumerate())
        .any(|(i, node)| !ensemble.is_cluster_member(i) && !node.known().is_admitted())
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
/// once when a connect learns a node's facts. With a Cluster member, only the `PING`s while
/// no probe helps (see [`probe_helps`]).
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
        if ensemble.config.slotted && !probe_helps(&ensemble) {
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
