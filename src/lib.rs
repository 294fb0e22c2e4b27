#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

// The layers, top down, and what each module owns: DESIGN.md, "Module map". No module
// imports one above it (scripts/check-layers.sh checks there are no import cycles).
mod acquire;
mod attempt;
// The ballot of one attempt (feeds `safety` from the replies), public only for
// tests/model.rs, which checks the same decisions the client makes.
#[doc(hidden)]
pub mod ballot;
mod builder;
mod client;
mod coalesce;
mod config;
mod deadline;
mod doctor;
mod ensemble;
mod error;
mod extend;
mod fanout;
mod fenced;
pub mod fencing;
mod guard;
mod heal;
mod info;
mod json;
mod lease;
pub mod metrics;
mod node;
mod protocol;
mod quorum;
mod release;
mod report;
mod retry;
mod scoped;
mod shutdown;
mod status;
mod wait;
// Pure rules of restart quarantine and fencing (called through `ballot`), public only for
// tests/model.rs.
#[doc(hidden)]
pub mod safety;

pub use builder::RedlockBuilder;
pub use client::{LockRequest, Redlock};
pub use doctor::{
    ClockOffset, DeploymentReport, Finding, FindingKind, NodeInfo, ServerKind, Severity,
};
pub use error::{Error, Result};
pub use extend::AutoExtend;
pub use fenced::{FencedContext, FencedGuard, FencedRequest};
pub use fencing::FencingToken;
pub use guard::LockGuard;
pub use heal::{NodeReadiness, NodeState, Readiness};
pub use lease::{LockContext, LostReason, LostSignal};
pub use protocol::holder::HolderInfo;
pub use redis;
pub use report::{NodeOutcome, NodeReport, NodeResult, QuarantineReason};
pub use retry::RetryPolicy;
pub use status::{Holder, KeptOut, KeyState, LockStatus, Verdict};
