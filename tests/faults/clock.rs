//! One clock for every process of a run.
//!
//! The checker compares times recorded by different worker processes, so they need a common
//! time base. `std::time::Instant` is `CLOCK_MONOTONIC` on Linux, but its raw value is not
//! exposed, and reading `CLOCK_MONOTONIC` directly needs `nix`'s `time` feature (not enabled
//! for this crate) or `unsafe` (not allowed here). So each process samples the pair
//! (`Instant`, `SystemTime`) once, at its first use, and from then on reports
//! `wall_at_anchor + (Instant::now() - instant_at_anchor)`:
//!
//! - every interval inside a process is measured on `CLOCK_MONOTONIC`;
//! - processes share one base because `CLOCK_REALTIME` is one kernel clock for all processes
//!   of a host (workers never run under the clock shim; only `redis-server` nodes do). The
//!   two clocks advance at the same (NTP-slewed) rate, so the only error is the anchor
//!   sample itself: the pair is taken 16 times and the tightest bracket kept; half its
//!   width is the process's [`uncertainty_ns`], which the checker uses as its tolerance;
//! - a step of the host's wall clock between two processes' anchors would shift one
//!   against the other: [`step_ns`] re-samples at the end of a process and the checker
//!   refuses a run where it moved by more than a millisecond.
//!
//! Values are nanoseconds since the Unix epoch.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

struct Anchor {
    instant: Instant,
    wall_ns: u64,
    err_ns: u64,
}

fn sample() -> Anchor {
    let mut best: Option<Anchor> = None;
    for _ in 0..16 {
        let before = Instant::now();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("wall clock after 1970");
        let after = Instant::now();
        let half = (after - before) / 2;
        let anchor = Anchor {
            instant: before + half,
            wall_ns: wall.as_nanos() as u64,
            err_ns: half.as_nanos() as u64 + 1,
        };
        if best.as_ref().is_none_or(|b| anchor.err_ns < b.err_ns) {
            best = Some(anchor);
        }
    }
    best.expect("at least one sample")
}

fn anchor() -> &'static Anchor {
    static ANCHOR: OnceLock<Anchor> = OnceLock::new();
    ANCHOR.get_or_init(sample)
}

/// Now, on the common clock.
pub fn now() -> u64 {
    at(Instant::now())
}

/// `instant` (this process's monotonic clock) on the common clock.
pub fn at(instant: Instant) -> u64 {
    let a = anchor();
    match instant.checked_duration_since(a.instant) {
        Some(after) => a.wall_ns + after.as_nanos() as u64,
        None => a.wall_ns - (a.instant - instant).as_nanos() as u64,
    }
}

/// A tokio instant (e.g. a guard's deadline) on the common clock.
pub fn at_tokio(instant: tokio::time::Instant) -> u64 {
    at(instant.into_std())
}

/// The common-clock time `ns` as an instant of this process (for sleeping until it).
pub fn instant_of(ns: u64) -> Instant {
    let a = anchor();
    if ns >= a.wall_ns {
        a.instant + std::time::Duration::from_nanos(ns - a.wall_ns)
    } else {
        a.instant - std::time::Duration::from_nanos(a.wall_ns - ns)
    }
}

/// Sleeps (blocking) until the common-clock time `ns`.
pub fn sleep_until(ns: u64) {
    let target = instant_of(ns);
    let now = Instant::now();
    if target > now {
        std::thread::sleep(target - now);
    }
}

/// Half the width of this process's anchor sample: how far its times may be off the
/// common clock.
pub fn uncertainty_ns() -> u64 {
    anchor().err_ns
}

/// How far the wall clock moved against the monotonic clock since the anchor was taken
/// (a step of the host clock); near zero normally.
pub fn step_ns() -> i64 {
    let fresh = sample();
    fresh.wall_ns as i64 - at(fresh.instant) as i64
}
