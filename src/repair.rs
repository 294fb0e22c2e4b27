//! Counter repair of a re-admitted node (issue 14, rolling restarts): the I/O around the
//! pure rules [`safety::repair_sources`] and [`safety::repair_value`].
//!
//! A node that lost its memory is re-admitted with an incomplete marker, so its fencing
//! counters count only once rewritten in its new life. After losses adding up to a
//! majority, one node at a time, a resource not fenced since would have too few trusted
//! counters for ever. When an attempt admits a node `x` whose marker names its current life
//! but is incomplete, this client repairs it in the background (once per node life, never
//! blocking a lock):
//! 1. read every node's marker; the sources are the other nodes whose marker is current
//!    and complete, a majority of the configured nodes or nothing happens now (retried on a
//!    later admission, at most once a second); `SCAN` every source fully for fencing
//!    counters (a refused `SCAN`: give up for this life, warn once, `x` stays incomplete);
//! 2. per batch of resources found, read the counter and its life on every reachable node,
//!    take [`safety::repair_value`] (a majority of trusted reads, or the whole repair stops
//!    with `x` incomplete), and raise `x`'s counters to it, tagged with `x`'s life
//!    ([`scripts::REPAIR`]: only while `x`'s marker still reads `<life>:0`);
//! 3. mark `x` complete with a compare-and-set of its marker ([`scripts::COMPLETE`]).
//!
//! Why that is safe: `docs/safety-v2.md`, "Counter repair".

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::deadline;
use crate::fanout::View;
use crate::metrics;
use crate::node::{Call, Node, NodeFailure};
use crate::protocol::reply::{self, Marker};
use crate::protocol::{keys, scripts};
use crate::safety::{self, CounterRead, NodeFacts};

/// Resources read and written per script call.
const BATCH: usize = 100;
/// `SCAN`'s `COUNT` hint.
const SCAN_COUNT: usize = 1_000;
/// How long a repair that could not proceed waits before a later admission retries it.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// One client's repairs, per node: the life last repaired (or being repaired) and how it
/// went.
#[derive(Debug, Default)]
pub(crate) struct Repairs {
    lives: Mutex<Vec<Option<Claim>>>,
    /// Whether the warning about a refused `SCAN` was given.
    warned: AtomicBool,
}

/// A node life's repair and its status.
type Claim = (Arc<str>, Status);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Under way, or finished for good in this life (repaired, refused, or the marker
    /// changed under it).
    Settled,
    /// Could not proceed; a later admission may retry from this instant.
    RetryAt(Instant),
}

/// How one repair ended (the metric's `outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Counters raised, marker complete.
    Repaired,
    /// Not now: too few complete sources, too few trusted reads, a node unreachable.
    Deferred,
    /// The node's ACL refused a command (`SCAN`, say): the node stays incomplete.
    Refused,
    /// The node's marker changed under the repair (it restarted): nothing was completed.
    Stale,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Repaired => "repaired",
            Outcome::Deferred => "deferred",
            Outcome::Refused => "refused",
            Outcome::Stale => "stale",
        }
    }
}

/// Why a repair stopped before completing its node.
type Stop = (Outcome, String);

impl Repairs {
    /// Whether a repair of node `i` in `life` may start now (and, if so, claims it).
    fn claim(&self, i: usize, life: &Arc<str>, nodes: usize) -> bool {
        let mut lives = self.lives.lock().unwrap_or_else(|p| p.into_inner());
        if lives.len() < nodes {
            lives.resize(nodes, None);
        }
        let Some(slot) = lives.get_mut(i) else {
            return false;
        };
        match slot {
            Some((seen, Status::Settled)) if seen == life => false,
            Some((seen, Status::RetryAt(at))) if seen == life && Instant::now() < *at => false,
            _ => {
                *slot = Some((Arc::clone(life), Status::Settled));
                true
            }
        }
    }

    fn settle(&self, i: usize, life: &Arc<str>, outcome: Outcome) {
        let mut lives = self.lives.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Some((seen, status))) = lives.get_mut(i)
            && seen == life
            && outcome == Outcome::Deferred
        {
            *status = Status::RetryAt(deadline::after(Instant::now(), RETRY_AFTER));
        }
    }
}

impl Repairs {
    /// The admission hook: node `i` was admitted in `life` with an incomplete marker.
    /// Starts its repair among `view`'s nodes, in its background, unless one ran or runs
    /// for that life (or was deferred less than a second ago).
    pub(crate) fn admitted(
        self: &Arc<Self>,
        view: View<'_>,
        prefix: &str,
        i: usize,
        life: &Arc<str>,
    ) {
        if !self.claim(i, life, view.nodes.len()) {
            return;
        }
        let job = Job {
            nodes: view.nodes.to_vec(),
            prefix: prefix.to_owned(),
            timeout: view.timeout,
            repairs: Arc::clone(self),
            x: i,
            life: Arc::clone(life),
        };
        view.background.spawn(job.run());
    }
}

/// One repair: everything it needs, owned (it runs in the background).
struct Job {
    nodes: Vec<Arc<Node>>,
    prefix: String,
    timeout: Duration,
    repairs: Arc<Repairs>,
    x: usize,
    life: Arc<str>,
}

impl Job {
    async fn run(self) {
        let start = Instant::now();
        let Some(node) = self.nodes.get(self.x) else {
            return;
        };
        let (outcome, detail) = match self.repair().await {
            Ok(repaired) => {
                node.seen(&self.life, Some(true), 0);
                (Outcome::Repaired, format!("{repaired} resources"))
            }
            Err(stop) => stop,
        };
        let took = start.elapsed();
        match outcome {
            Outcome::Repaired => {
                tracing::info!(node = node.name(), %detail, ?took, "fencing counters repaired, node complete");
            }
            Outcome::Refused if !self.repairs.warned.swap(true, Ordering::Relaxed) => {
                tracing::warn!(node = node.name(), %detail, "fencing counter repair refused; the node's counters stay untrusted until rewritten (grant SCAN, or set a fence floor after a rolling restart)");
            }
            _ => {
                tracing::debug!(node = node.name(), outcome = outcome.label(), %detail, ?took, "fencing counter repair stopped")
            }
        }
        metrics::fence_repair(node.name(), outcome.label());
        self.repairs.settle(self.x, &self.life, outcome);
    }

    /// Steps 1 to 3 (module docs); the number of resources repaired.
    async fn repair(&self) -> Result<usize, Stop> {
        let markers = self.markers().await?;
        let sources = self.sources(&markers)?;
        let mut resources = BTreeSet::new();
        for &i in &sources {
            self.scan(i, &mut resources).await?;
        }
        let resources: Vec<String> = resources.into_iter().collect();
        for batch in resources.chunks(BATCH) {
            let locks: Vec<String> = batch.iter().map(|r| keys::lock(&self.prefix, r)).collect();
            let values = self.values(&locks).await?;
            let call = (values.iter()).fold(
                Call::script(&scripts::REPAIR, &self.prefix, &locks).arg(&*self.life),
                |call, v| call.arg(*v),
            );
            self.on_x(call, "counters").await?;
        }
        let call = Call::script(&scripts::COMPLETE, &self.prefix, &[]).arg(&*self.life);
        self.on_x(call, "marker").await?;
        Ok(resources.len())
    }

    /// Every node's marker (`None`: unreachable, or no marker), with its `run_id` then.
    /// Node `x` itself must read `<life>:0`.
    async fn markers(&self) -> Result<Vec<Option<(Marker, NodeFactsOwned)>>, Stop> {
        let key = keys::global(&self.prefix, keys::Global::Marker);
        let replies = self
            .everywhere(|| {
                let mut cmd = redis::cmd("GET");
                cmd.arg(&key);
                Call::new(cmd).repeatable()
            })
            .await;
        let mut markers = Vec::with_capacity(replies.len());
        for (node, reply) in self.nodes.iter().zip(replies) {
            let marker = match reply {
                Ok(value) => reply::decode::<Option<String>>(value)
                    .ok()
                    .flatten()
                    .and_then(|text| Marker::parse(&text)),
                Err(NodeFailure::Denied(e)) => return Err((Outcome::Refused, e)),
                Err(_) => None,
            };
            markers.push(marker.map(|m| (m, NodeFactsOwned::of(node))));
        }
        let x_current = markers
            .get(self.x)
            .and_then(Option::as_ref)
            .is_some_and(|(m, facts)| {
                !m.complete && *m.life == *self.life && facts.run_id.as_deref() == Some(&*self.life)
            });
        match x_current {
            true => Ok(markers),
            false => Err((
                Outcome::Deferred,
                "node's marker is not <life>:0 (yet)".into(),
            )),
        }
    }

    /// Step 1's sources: the other nodes whose marker is current and complete.
    fn sources(&self, markers: &[Option<(Marker, NodeFactsOwned)>]) -> Result<Vec<usize>, Stop> {
        let complete: Vec<bool> = markers
            .iter()
            .map(|m| {
                m.as_ref()
                    .is_some_and(|(m, facts)| m.complete && facts.intact(m))
            })
            .collect();
        safety::repair_sources(&complete, self.x, self.nodes.len()).ok_or_else(|| {
            let n = complete.iter().filter(|c| **c).count();
            (
                Outcome::Deferred,
                format!("{n} complete nodes reachable, a majority of others needed"),
            )
        })
    }

    /// Every fencing counter's resource on node `i`, by a full `SCAN`.
    async fn scan(&self, i: usize, found: &mut BTreeSet<String>) -> Result<(), Stop> {
        let node = self.node(i)?;
        let pattern = keys::fence_pattern(&self.prefix);
        let mut cursor = String::from("0");
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(&cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let reply = self.send(node, &Call::new(cmd).repeatable()).await?;
            let (next, keys) = reply::decode::<(String, Vec<String>)>(reply)
                .map_err(|o| (Outcome::Deferred, o.to_string()))?;
            found.extend(
                keys.iter()
                    .filter_map(|k| keys::fence_resource(&self.prefix, k))
                    .map(str::to_owned),
            );
            if next == "0" {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Step 2's values for the lock keys `locks`, read on every reachable node.
    async fn values(&self, locks: &[String]) -> Result<Vec<u64>, Stop> {
        let replies = self
            .everywhere(|| Call::script(&scripts::REPAIR_READ, &self.prefix, locks))
            .await;
        let mut reads: Vec<Vec<CounterRead>> = vec![Vec::new(); locks.len()];
        for (node, reply) in self.nodes.iter().zip(replies) {
            let items = match reply.map(reply::decode::<Vec<Option<String>>>) {
                Ok(Ok(items)) if items.len() == 2 * locks.len() + 1 => items,
                Err(NodeFailure::Denied(e)) => return Err((Outcome::Refused, e)),
                _ => continue,
            };
            let facts = NodeFactsOwned::of(node);
            let marker = items[0].as_deref().and_then(Marker::parse);
            for (r, read) in reads.iter_mut().enumerate() {
                read.push(facts.counter(marker.as_ref(), &items[2 * r + 1], &items[2 * r + 2]));
            }
        }
        let n = self.nodes.len();
        (reads.iter().zip(locks))
            .map(|(reads, lock)| {
                safety::repair_value(reads, n).ok_or_else(|| {
                    let trusted = reads.iter().filter(|r| r.trusted).count();
                    (
                        Outcome::Deferred,
                        format!("{lock}: {trusted} trusted counters read"),
                    )
                })
            })
            .collect()
    }

    /// Runs a repair script on node `x`: 1, or the marker changed (stale).
    async fn on_x(&self, call: Call, what: &str) -> Result<(), Stop> {
        let reply = self.send(self.node(self.x)?, &call).await?;
        match reply::decode::<i64>(reply) {
            Ok(1) => Ok(()),
            _ => Err((Outcome::Stale, format!("{what}: marker no longer <life>:0"))),
        }
    }

    fn node(&self, i: usize) -> Result<&Arc<Node>, Stop> {
        self.nodes
            .get(i)
            .ok_or((Outcome::Deferred, "no such node".into()))
    }

    async fn send(&self, node: &Arc<Node>, call: &Call) -> Result<Value, Stop> {
        match tokio::time::timeout(self.timeout, node.send(call)).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(NodeFailure::Denied(e))) => Err((Outcome::Refused, e)),
            Ok(Err(e)) => Err((Outcome::Deferred, format!("{}: {e:?}", node.name()))),
            Err(_) => Err((Outcome::Deferred, format!("{}: timed out", node.name()))),
        }
    }

    /// `call()` on every node at once, each bounded by the node timeout.
    async fn everywhere(&self, call: impl Fn() -> Call) -> Vec<Result<Value, NodeFailure>> {
        let requests = self.nodes.iter().map(|node| {
            let call = call();
            async move {
                tokio::time::timeout(self.timeout, node.send(&call))
                    .await
                    .unwrap_or(Err(NodeFailure::TimedOut))
            }
        });
        futures::future::join_all(requests).await
    }
}

/// What a repair needs of a node's connect facts, taken right after its reply.
struct NodeFactsOwned {
    run_id: Option<Arc<str>>,
    persistence: safety::Persistence,
}

impl NodeFactsOwned {
    fn of(node: &Node) -> Self {
        let read = node.blank_read();
        NodeFactsOwned {
            run_id: read.run_id,
            persistence: read.persistence,
        }
    }

    fn facts<'a>(&'a self, marker: &'a Marker) -> NodeFacts<'a> {
        NodeFacts {
            marker: Some(safety::Marker {
                life: &marker.life,
                complete: marker.complete,
            }),
            run_id: self.run_id.as_deref(),
            uptime: None,
            persistence: self.persistence,
        }
    }

    /// Whether `marker` names the node's current life (or it is durable).
    fn intact(&self, marker: &Marker) -> bool {
        self.facts(marker).is_intact()
    }

    /// One counter read, trusted as the ballot trusts it.
    fn counter(
        &self,
        marker: Option<&Marker>,
        value: &Option<String>,
        life: &Option<String>,
    ) -> CounterRead {
        let parsed = value.as_deref().map(str::parse::<u64>);
        let trusted = marker.is_some_and(|m| {
            let this_life = life
                .as_deref()
                .is_some_and(|l| Some(l) == self.run_id.as_deref());
            safety::counter_trusted(self.intact(m), m.complete, this_life)
        });
        match parsed {
            // An unreadable counter is not trusted: the safe side.
            Some(Err(_)) => CounterRead {
                value: None,
                trusted: false,
            },
            value => CounterRead {
                value: value.and_then(Result::ok),
                trusted,
            },
        }
    }
}
