//! Observing an election: who leads, read from a majority at a bounded interval and at
//! once on each announcement of a term proclaimed or resigned, as a [`watch`] channel that
//! changes only when the leader does.

use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::election::Election;
use crate::election::announce::{self, Announced};
use crate::election::term::{Leader, read_leader};
use crate::error::{Error, Result};
use crate::report::NodeReport;

/// Starts observing `election`: a majority read every `every`, and one as soon as an
/// announcement arrives, into the receiver returned; the tasks end once every receiver
/// is dropped.
///
/// # Errors
///
/// [`Error::Config`] for a zero interval, or when called outside a tokio runtime.
pub(crate) fn observe(election: &Election, every: Duration) -> Result<watch::Receiver<Leader>> {
    if every.is_zero() {
        return Err(Error::Config(
            "an observer's interval must be above zero".into(),
        ));
    }
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| Error::Config("an election is observed from within a tokio runtime".into()))?;
    let (sender, receiver) = watch::channel(unknown());
    let (heard_tx, heard) = mpsc::unbounded_channel();
    let listening = match election.channel() {
        Some(channel) => announce::listen(election.ensemble(), channel, &heard_tx),
        None => Vec::new(),
    };
    drop(heard_tx);
    let election = election.clone();
    runtime.spawn(async move {
        keep_observing(&election, every, sender, heard).await;
        listening.iter().for_each(tokio::task::JoinHandle::abort);
    });
    Ok(receiver)
}

fn unknown() -> Leader {
    Leader::Unknown {
        report: NodeReport::default(),
    }
}

/// What an observer knows of the terms before it reports a reading.
#[derive(Debug, Default)]
struct Known {
    /// The highest epoch reported.
    reported: u64,
    /// The highest epoch whose resignation was announced.
    ended: u64,
}

impl Known {
    /// `seen`, unless it is a term the observer knows ended (its resignation announced)
    /// or older than one it reported: unknown then, never that leader.
    fn judge(&mut self, seen: Leader) -> Leader {
        match seen {
            Leader::Elected(term) if term.epoch.get() <= self.ended => unknown(),
            Leader::Elected(term) if term.epoch.get() < self.reported => unknown(),
            Leader::Elected(term) => {
                self.reported = term.epoch.get();
                Leader::Elected(term)
            }
            other => other,
        }
    }

    fn heard(&mut self, announced: Announced) {
        if let Announced::Ended(epoch) = announced {
            self.ended = self.ended.max(epoch);
        }
    }
}

async fn keep_observing(
    election: &Election,
    every: Duration,
    sender: watch::Sender<Leader>,
    mut heard: mpsc::UnboundedReceiver<Announced>,
) {
    let mut known = Known::default();
    loop {
        let read = read_leader(election.ensemble(), election.key()).await;
        let seen = known.judge(read.unwrap_or_else(|_| unknown()));
        sender.send_if_modified(|shown| match is_same_leader(shown, &seen) {
            true => false,
            false => {
                *shown = seen;
                true
            }
        });
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            Some(announced) = heard.recv() => known.heard(announced),
            () = sender.closed() => return,
        }
        // Announcements that came together make one read.
        while let Ok(announced) = heard.try_recv() {
            known.heard(announced);
        }
    }
}

/// Whether two readings name the same leader (one term, one value), or both none, or both
/// unknown: what an observer reports as a change.
fn is_same_leader(a: &Leader, b: &Leader) -> bool {
    match (a, b) {
        (Leader::Elected(x), Leader::Elected(y)) => {
            (x.epoch, &x.value, &x.holder.token) == (y.epoch, &y.value, &y.holder.token)
        }
        (Leader::Vacant, Leader::Vacant) => true,
        (Leader::Unknown { .. }, Leader::Unknown { .. }) => true,
        _ => false,
    }
}
