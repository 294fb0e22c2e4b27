//! `quorum-lock init`: a new deployment's first-start step. Declares the nodes new, so
//! that they vote at once even with a node down from the start (see
//! [`Redlock::declare_new`]); on an ensemble that has served it writes nothing.

use quorum_lock::{Error, FirstStart, Redlock};

use crate::{EX_UNAVAILABLE, Failure, say};

/// Declares the ensemble new and prints what was done; 0 when declared or already in
/// service, 69 when too few nodes answered.
pub(crate) async fn init(redlock: &Redlock) -> Result<u8, Failure> {
    match redlock.declare_new().await {
        Ok(FirstStart::Declared {
            admitted,
            unreachable,
        }) => {
            for node in &admitted {
                say(&format!("{node}  admitted: votes"));
            }
            for (node, why) in &unreachable {
                say(&format!(
                    "{node}  unreachable ({why}): readmitted by restart quarantine once it answers"
                ));
            }
            say(&format!(
                "declared new: {} of {} nodes admitted",
                admitted.len(),
                admitted.len() + unreachable.len()
            ));
            Ok(0)
        }
        Ok(FirstStart::InService { marked }) => {
            say(&format!(
                "already in service (admitted before: {}): nothing written; `quorum-lock \
                 repair` readmits restarted nodes",
                marked.join(", ")
            ));
            Ok(0)
        }
        Err(e @ Error::Unavailable { .. }) => Err(Failure::new(
            EX_UNAVAILABLE,
            format!("init: nothing declared: {e}"),
        )),
        Err(e) => Err(Failure::from_error(&e)),
        Ok(_) => Ok(0),
    }
}
