//! Validated settings and the TTL rules every lock and extension goes through: below
//! everything that acquires, above the pure quorum arithmetic.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::protocol::keys::Space;
use crate::rules::retry::RetryPolicy;
use crate::rules::{quorum, safety};

/// Validated settings shared by every clone of a `Redlock`.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) key_prefix: String,
    /// Whether a member is a Redis Cluster: every name then carries its lock key's slot
    /// tag (see `keys::Space`).
    pub(crate) slotted: bool,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) wait: Duration,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) default_ttl: Duration,
    /// The longest TTL any client of the deployment uses (see
    /// `RedlockBuilder::ttl_ceiling`): no lock or extension goes above it, and a node whose
    /// history cannot be read is kept out this long after it started.
    pub(crate) ttl_ceiling: Duration,
    pub(crate) notifications: bool,
    pub(crate) quarantine: bool,
    /// Use a node's native compare-and-delete / compare-and-set where it has them.
    pub(crate) native_commands: bool,
    /// Every fencing token is above this (see `RedlockBuilder::fence_floor`).
    pub(crate) fence_floor: Option<u64>,
    /// The fixed part of every lock value this client writes: host, process id, program
    /// (see `protocol::holder::describe`); empty with `holder_info(false)`.
    pub(crate) holder: Arc<str>,
}

impl Config {
    /// Where this client's names live.
    pub(crate) fn space(&self) -> Space<'_> {
        Space {
            prefix: &self.key_prefix,
            slotted: self.slotted,
        }
    }
}

/// Rejects a TTL that is zero, not a whole number of milliseconds' worth, too large for
/// Redis, or too short to leave any validity after the drift allowance and one node timeout.
pub(crate) fn check_ttl(ttl: Duration, drift_factor: f64, node_timeout: Duration) -> Result<()> {
    if ttl.as_millis() == 0 {
        return Err(Error::Config(format!(
            "ttl {ttl:?} is below one millisecond; Redis expiry has millisecond resolution"
        )));
    }
    if ttl > MAX_TTL {
        return Err(Error::Config(format!(
            "ttl {ttl:?} exceeds the maximum of {MAX_TTL:?}"
        )));
    }
    if node_timeout >= ttl {
        return Err(Error::Config(format!(
            "ttl {ttl:?} is too short: it is not above the node timeout {node_timeout:?}, so a \
             lock could expire before its nodes answered; use a ttl well above the node \
             timeout or a smaller node timeout"
        )));
    }
    if !quorum::ttl_is_usable(ttl, drift_factor, node_timeout) {
        let floor = node_timeout.saturating_add(safety::drift_allowance(ttl, drift_factor));
        return Err(Error::Config(format!(
            "ttl {ttl:?} is too short: drift allowance and node timeout use {floor:?} of it; \
             use a ttl well above that or a smaller node timeout"
        )));
    }
    Ok(())
}

/// Rejects a TTL above the deployment's ceiling: restart quarantine waits out at most the
/// ceiling when it cannot read a node's history, so a longer lease could outlive it.
pub(crate) fn check_ceiling(ttl: Duration, ceiling: Duration) -> Result<()> {
    if ttl > ceiling {
        return Err(Error::Config(format!(
            "ttl {ttl:?} is above the ttl ceiling {ceiling:?}; raise the ceiling \
             (`ttl_ceiling`, CLI --ttl-ceiling) on every client of these nodes, or use a \
             shorter ttl with auto-extension"
        )));
    }
    Ok(())
}

/// Ten years: far beyond any sensible lock, far below what `PX` accepts.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Whole milliseconds of `d`, saturating.
pub(crate) fn whole_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_checks_name_the_problem() {
        let ok = check_ttl(Duration::from_secs(10), 0.01, Duration::from_millis(50));
        assert!(ok.is_ok());
        for (ttl, needle) in [
            (Duration::ZERO, "below one millisecond"),
            (Duration::from_micros(900), "below one millisecond"),
            (Duration::from_millis(51), "too short"),
            (Duration::from_millis(50), "not above the node timeout"),
            (MAX_TTL + Duration::from_secs(1), "exceeds the maximum"),
        ] {
            let err = check_ttl(ttl, 0.01, Duration::from_millis(50)).unwrap_err();
            assert!(err.to_string().contains(needle), "{ttl:?}: {err}");
        }
        let ceiling = Duration::from_secs(60);
        assert!(check_ceiling(ceiling, ceiling).is_ok());
        let err = check_ceiling(ceiling + Duration::from_millis(1), ceiling).unwrap_err();
        assert!(err.to_string().contains("above the ttl ceiling"), "{err}");
    }
}
