//! With restart quarantine off: the warning given once every node's durability is known,
//! naming the nodes that may lose writes on a restart.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::net::node::Node;
use crate::rules::safety::Persistence;

/// With restart quarantine off: warns once, as soon as every node's connect has learnt its
/// durability, naming the nodes that may lose writes on a restart (no `appendfsync
/// always`, or unknown). Fencing is chosen per request (`.fenced()`), not for the client,
/// so the warning is given whether or not this client will fence, and says that fenced
/// locks are refused there (a fenced acquisition fails with a configuration error).
pub(super) fn watch_persistence(nodes: &[Arc<Node>]) {
    let learnt: Vec<(String, Option<Persistence>)> =
        nodes.iter().map(|n| (n.name().to_owned(), None)).collect();
    let learnt = Arc::new(Mutex::new(learnt));
    let warned = Arc::new(AtomicBool::new(false));
    for node in nodes {
        let (learnt, warned) = (Arc::clone(&learnt), Arc::clone(&warned));
        node.on_facts(Arc::new(move |name, persistence| {
            let volatile = {
                let mut learnt = learnt.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(slot) = learnt.iter_mut().find(|(n, _)| n == name) {
                    slot.1 = Some(persistence);
                }
                volatile_nodes(&learnt)
            };
            if let Some(volatile) = volatile.filter(|v| !v.is_empty())
                && !warned.swap(true, Ordering::Relaxed)
            {
                tracing::warn!(
                    nodes = ?volatile,
                    "restart quarantine is off on nodes without appendfsync always: a \
                     restart of one can let a lock be granted twice, and fenced locks are \
                     refused (their fencing tokens could repeat)"
                );
            }
        }));
    }
}

/// Once every node's durability is known: the nodes that may lose writes on a restart
/// (`None` while one is not known yet).
fn volatile_nodes(learnt: &[(String, Option<Persistence>)]) -> Option<Vec<String>> {
    learnt
        .iter()
        .try_fold(Vec::new(), |mut volatile, (name, persistence)| {
            if (*persistence)? != Persistence::AofAlways {
                volatile.push(name.clone());
            }
            Some(volatile)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_nodes_are_named_once_every_node_is_known() {
        let known = |p: &[Option<Persistence>]| -> Vec<(String, Option<Persistence>)> {
            p.iter()
                .enumerate()
                .map(|(i, p)| (format!("n{i}"), *p))
                .collect()
        };
        let (aof, vol, unknown) = (
            Some(Persistence::AofAlways),
            Some(Persistence::Volatile),
            Some(Persistence::Unknown),
        );
        assert_eq!(volatile_nodes(&known(&[aof, None, vol])), None);
        assert_eq!(volatile_nodes(&known(&[aof, aof])), Some(vec![]));
        assert_eq!(
            volatile_nodes(&known(&[vol, aof, unknown])),
            Some(vec!["n0".to_owned(), "n2".to_owned()])
        );
    }
}
