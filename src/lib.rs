#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod ballot;
mod builder;
mod client;
mod doctor;
mod error;
mod extend;
mod fanout;
pub mod fencing;
mod guard;
mod info;
mod json;
mod lease;
pub mod metrics;
mod node;
mod notify;
mod protocol;
mod queue;
mod quorum;
mod report;
mod retry;
// Pure rules of issue 14 (called through `ballot`), public only for tests/model.rs.
#[doc(hidden)]
pub mod safety;
mod scoped;
mod status;

pub use builder::RedlockBuilder;
pub use client::{LockRequest, Redlock};
pub use doctor::{
    ClockOffset, DeploymentReport, Finding, FindingKind, NodeInfo, ServerKind, Severity,
};
pub use error::{Error, Result};
pub use extend::AutoExtend;
pub use guard::LockGuard;
pub use lease::{LockContext, LostReason, LostSignal};
pub use redis;
pub use report::{NodeOutcome, NodeReport, NodeResult, QuarantineReason};
pub use retry::RetryPolicy;
pub use status::{Holder, KeyState, LockStatus, Verdict};
