//! What observers hear between their reads: the term scripts publish on the election's
//! channel when a leader proclaims its term and when it resigns. A message only wakes an
//! observer for a majority read (never taken for the leader on one node's word), and an
//! ended term's epoch is one the observer will not report again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::ensemble::Ensemble;
use crate::net::node::Node;
use crate::net::subscription::Subscription;
use crate::protocol::keys;

/// The longest a subscription may take to connect and subscribe.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The pause before a lost subscription connects again.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(500);

/// One announcement of the election's channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Announced {
    /// A leader proclaimed the term of this epoch.
    Elected(u64),
    /// The leader of this epoch resigned.
    Ended(u64),
}

impl Announced {
    /// The message published: `elected <epoch>` or `ended <epoch>`.
    pub(crate) fn message(self) -> String {
        match self {
            Announced::Elected(epoch) => format!("elected {epoch}"),
            Announced::Ended(epoch) => format!("ended {epoch}"),
        }
    }

    /// A message read back; `None` for anything else.
    fn parse(message: &str) -> Option<Announced> {
        let (what, epoch) = message.split_once(' ')?;
        let epoch = epoch.parse().ok()?;
        match what {
            "elected" => Some(Announced::Elected(epoch)),
            "ended" => Some(Announced::Ended(epoch)),
            _ => None,
        }
    }
}

/// The channel of election `name`'s announcements on `ensemble`, when it announces: with
/// release notifications on (a Cluster member turns them off).
pub(crate) fn channel(ensemble: &Ensemble, name: &str) -> Option<String> {
    let config = &ensemble.config;
    (config.notifications && !config.slotted)
        .then(|| keys::election_channel(&config.key_prefix, name))
}

/// Listens on `channel` on every node of `ensemble`, each subscription connecting again
/// after it is lost, and sends what they hear to `heard`; the tasks end once its receiver
/// is dropped.
pub(crate) fn listen(
    ensemble: &Ensemble,
    channel: &str,
    heard: &mpsc::UnboundedSender<Announced>,
) -> Vec<JoinHandle<()>> {
    (ensemble.nodes.iter())
        .map(|node| {
            let (node, channel, heard) = (Arc::clone(node), channel.to_owned(), heard.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = subscribe(&node, &channel, &heard) => {}
                    () = heard.closed() => {}
                }
            })
        })
        .collect()
}

/// `node`'s subscription to `channel`, for ever.
async fn subscribe(node: &Node, channel: &str, heard: &mpsc::UnboundedSender<Announced>) {
    loop {
        let opened = tokio::time::timeout(SUBSCRIBE_TIMEOUT, Subscription::open(node, channel));
        if let Ok(Ok(mut subscription)) = opened.await {
            while let Some(msg) = subscription.next().await {
                let message = msg.get_payload::<String>().unwrap_or_default();
                if let Some(announced) = Announced::parse(&message) {
                    let _ = heard.send(announced);
                }
            }
        }
        tokio::time::sleep(RESUBSCRIBE_AFTER).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_back_as_what_was_announced() {
        for announced in [Announced::Elected(7), Announced::Ended(u64::MAX)] {
            assert_eq!(Announced::parse(&announced.message()), Some(announced));
        }
        for other in ["", "elected", "ended x", "left 3", "elected  3"] {
            assert_eq!(Announced::parse(other), None, "{other:?}");
        }
    }
}
