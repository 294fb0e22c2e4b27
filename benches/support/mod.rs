//! Helpers for `benches/compare.rs`: the contenders, the measuring loops, the correctness
//! probe, process statistics from `/proc`, percentiles and plain-text tables.

pub mod contender;
pub mod fit;
pub mod measure;
pub mod probe;
pub mod stats;
pub mod svg;
pub mod table;
