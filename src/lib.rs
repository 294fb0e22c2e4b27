#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod builder;
mod client;
mod error;
mod fanout;
mod guard;
pub mod metrics;
mod node;
mod quorum;
mod report;
mod retry;
mod scripts;

pub use builder::RedlockBuilder;
pub use client::{LockRequest, Redlock};
pub use error::{Error, Result};
pub use guard::LockGuard;
pub use report::{NodeOutcome, NodeReport, NodeResult};
pub use retry::RetryPolicy;
