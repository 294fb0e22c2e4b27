//! The scenarios of `benches/compare.rs`, one module each; every module has one `run`
//! that measures its contenders and prints its tables.

#[cfg(feature = "blocking")]
pub mod blocking_overhead;
pub mod cluster_member;
pub mod contention;
pub mod election;
pub mod fairness;
pub mod latency;
pub mod memory;
pub mod native;
pub mod rwlock;
pub mod scale;
pub mod semaphore;
pub mod sentinel;
pub mod slow_node;
pub mod throughput;

/// Scenario 14 without the `blocking` feature: nothing to measure.
#[cfg(not(feature = "blocking"))]
pub mod blocking_overhead {
    pub fn run(_: crate::Cfg) {
        println!("Scenario 14: skipped (build with --features blocking)\n");
    }
}
