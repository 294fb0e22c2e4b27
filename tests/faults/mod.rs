//! Shared machinery of the fault-injection suite, used by `tests/faults.rs` (portable tier:
//! local `redis-server` processes) and `tests/faults_docker.rs` (Docker tier: one container
//! per node). See `docker/README.md` for how to run both and read their tables.
//!
//! - [`clock`]: one time base for every process of a run;
//! - [`history`]: the hold records, the checker and the result table;
//! - [`worker`]: the worker processes (the test binary re-executed) and their parent side;
//! - [`proxy`]: the user-space TCP proxy of `tests/common` that adds latency, black-holes or
//!   resets a link;
//! - [`ensemble`]: the nodes and the faults that can be applied to them;
//! - [`nemesis`]: randomised fault schedules against concurrent workers;
//! - [`scenarios`]: the deterministic bare-majority and paused-holder scenarios;
//! - [`holders`]: long holders of every kind that a liveness row keeps through its faults;
//! - [`liveness`]: rows that restart nodes empty (or keep a minority down) around idle
//!   workers and measure how fast locks are granted again;
//! - [`sentinel_members`]: members under Sentinel, whose fault is a failover;
//! - [`cluster_members`]: members that are Redis Clusters, whose fault is a failover of
//!   every shard;
//! - [`rng`]: a small seeded generator, so a failing schedule can be replayed.
#![allow(dead_code)]

pub mod clock;
pub mod cluster_members;
pub mod ensemble;
pub mod history;
pub mod holders;
pub mod liveness;
pub mod nemesis;
pub mod rng;
pub mod scenarios;
pub mod sentinel_members;
pub mod worker;

pub use crate::common::proxy;
