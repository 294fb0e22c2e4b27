//! Helpers for `benches/compare.rs`: a reply-delaying TCP proxy, process statistics from
//! `/proc`, percentiles and plain-text tables.

pub mod proxy;
pub mod stats;
pub mod table;
