#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

// Layout, top down: each folder's mod.rs says what it owns, names its files and states the
// interface the rest of the crate uses (DESIGN.md, section 10, maps the folders). No module
// imports one above it (scripts/check-layers.sh).
//
//   blocking/  the blocking API (feature `blocking`): a runtime thread per client,
//              thin wrappers of the async handles; nothing imports it
//   client/    the public handle: Redlock, its builder, lock requests, shutdown
//   rwlock/    the read-write lock: a writer's lock key, readers each with an expiry
//   semaphore/ the counting semaphore: K slot locks, each a quorum mutex
//   election/  leader election: a term is a fenced lock, its epoch the fencing token
//   inspect/   read-only: status of a lock, the deployment check (doctor), JSON
//   acquire/   lock(): the retry loop, one attempt, its ballot, first contact, healing
//   held/      a held lock: guard, lease (validity, lost signal), extension, release
//   ensemble/  the shared state: nodes, configuration, majority, queue, notifier;
//              the client's lifecycle; a Cluster member's views seated per slot
//   wait/      waiting for a held lock: local turns, waiting lists, release wake-ups
//   fencing    fencing tokens and the guarded write (public)
//   net/       connections, the command wrapper, node facts, fan-out rounds
//   protocol/  the wire: Lua scripts, key names, native commands, reply decoding
//   rules/     pure rules: quorum, safety (quarantine, fencing), sentinel, cluster, retry,
//              deadlines
//   error, report, metrics: the error, per-node outcomes, the metrics emitted
// The CLI is the binary src/bin/quorum-lock.rs with its modules in src/bin/quorum-lock/.
mod acquire;
#[cfg(feature = "blocking")]
pub mod blocking;
mod client;
mod election;
mod ensemble;
mod error;
pub mod fencing;
mod held;
mod inspect;
pub mod metrics;
mod net;
mod protocol;
mod report;
mod rules;
mod rwlock;
mod semaphore;
mod wait;

// The ballot of one attempt (feeds `safety` from the replies) and the pure rules of
// restart quarantine, fencing, Sentinel and Cluster members, public only for the model
// checks (tests/model.rs, tests/model_kinds.rs, tests/model_sentinel.rs,
// tests/model_cluster.rs), which check the same decisions the client makes;
// tests/model_reseat.rs models the re-seat rule on its own, tests/model_election.rs the
// rules of leader election (`election_rules`).
#[doc(hidden)]
pub use acquire::ballot;
#[doc(hidden)]
pub use rules::cluster;
#[doc(hidden)]
pub use rules::election as election_rules;
#[doc(hidden)]
pub use rules::safety;
#[doc(hidden)]
pub use rules::sentinel;

pub use acquire::first_start::FirstStart;
pub use acquire::heal::{LockAtRisk, NodeReadiness, NodeState, Readiness};
pub use acquire::request::LockRequest;
pub use client::Redlock;
pub use client::builder::RedlockBuilder;
pub use client::fenced::{FencedContext, FencedGuard, FencedRequest};
pub use election::candidates::Candidate;
pub use election::leadership::Leadership;
pub use election::term::{Leader, Term};
pub use election::{Campaign, Election};
pub use error::{Error, LostReason, Result};
pub use fencing::FencingToken;
pub use held::extend::AutoExtend;
pub use held::guard::LockGuard;
pub use held::lease::{LockContext, LostSignal};
pub use held::ticket::LockTicket;
pub use inspect::doctor::{
    ClockOffset, ClusterShard, DeploymentReport, Finding, FindingKind, KeyCensus, NodeInfo,
    SentinelAnswer, ServerKind, Severity,
};
pub use inspect::readers::{Reader, RwLockStatus};
pub use inspect::status::{Holder, KeptOut, KeyState, LockStatus, Verdict};
pub use inspect::waiters::Waiter;
pub use protocol::holder::HolderInfo;
pub use redis;
pub use report::{NodeOutcome, NodeReport, NodeResult, QuarantineReason};
pub use rules::retry::RetryPolicy;
pub use rwlock::RwLock;
pub use rwlock::read::{ReadGuard, ReadRequest};
pub use semaphore::permit::Permit;
pub use semaphore::{PermitRequest, Semaphore};
