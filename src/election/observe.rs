//! Observing an election: who leads, read from a majority at a bounded interval, as a
//! [`watch`] channel that changes only when the leader does.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::election::term::{Leader, read_leader};
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::report::NodeReport;

/// Starts reading who leads the election of lock key `key` every `every`, into the
/// receiver returned; the task ends once every receiver is dropped.
///
/// # Errors
///
/// [`Error::Config`] for a zero interval, or when called outside a tokio runtime.
pub(crate) fn observe(
    ensemble: &Arc<Ensemble>,
    key: &str,
    every: Duration,
) -> Result<watch::Receiver<Leader>> {
    if every.is_zero() {
        return Err(Error::Config(
            "an observer's interval must be above zero".into(),
        ));
    }
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| Error::Config("an election is observed from within a tokio runtime".into()))?;
    let unknown = Leader::Unknown {
        report: NodeReport::default(),
    };
    let (sender, receiver) = watch::channel(unknown);
    runtime.spawn(keep_observing(
        Arc::clone(ensemble),
        key.to_owned(),
        every,
        sender,
    ));
    Ok(receiver)
}

async fn keep_observing(
    ensemble: Arc<Ensemble>,
    key: String,
    every: Duration,
    sender: watch::Sender<Leader>,
) {
    let mut highest = 0;
    loop {
        let read = read_leader(&ensemble, &key).await;
        let seen = no_older_term(
            read.unwrap_or(Leader::Unknown {
                report: NodeReport::default(),
            }),
            &mut highest,
        );
        sender.send_if_modified(|shown| match is_same_leader(shown, &seen) {
            true => false,
            false => {
                *shown = seen;
                true
            }
        });
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = sender.closed() => return,
        }
    }
}

/// `seen`, unless it is a term older than the newest one reported already (`highest`),
/// which a majority read should never return (the nodes lost data): unknown then.
fn no_older_term(seen: Leader, highest: &mut u64) -> Leader {
    match seen {
        Leader::Elected(term) if term.epoch.get() < *highest => Leader::Unknown {
            report: NodeReport::default(),
        },
        Leader::Elected(term) => {
            *highest = term.epoch.get();
            Leader::Elected(term)
        }
        other => other,
    }
}

/// Whether two readings name the same leader (one term, one value), or both none, or both
/// unknown: what an observer reports as a change.
pub(crate) fn is_same_leader(a: &Leader, b: &Leader) -> bool {
    match (a, b) {
        (Leader::Elected(x), Leader::Elected(y)) => {
            (x.epoch, &x.value, &x.holder.token) == (y.epoch, &y.value, &y.holder.token)
        }
        (Leader::Vacant, Leader::Vacant) => true,
        (Leader::Unknown { .. }, Leader::Unknown { .. }) => true,
        _ => false,
    }
}
