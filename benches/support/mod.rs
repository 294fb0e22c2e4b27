//! Helpers for `benches/compare.rs`: the contenders, the measuring loops, the correctness
//! probe, process statistics from `/proc`, percentiles, plain-text tables, and the shard
//! masters of a Redis Cluster.

pub mod contender;
pub mod fit;
pub mod measure;
pub mod probe;
pub mod shard_probe;
pub mod stats;
pub mod svg;
pub mod table;
