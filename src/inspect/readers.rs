//! Read-only inspection of a read-write lock: its writer, as [`status`](super::status)
//! reads a lock, and its readers on every node.

use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashMap;
use redis::Value;

use crate::ensemble::Ensemble;
use crate::error::Result;
use crate::inspect::json::JsonObject;
use crate::inspect::status::{self, LockStatus};
use crate::net::answers;
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::protocol::holder::HolderInfo;
use crate::protocol::reply;
use crate::protocol::rw_scripts;
use crate::report::NodeOutcome;

/// Who holds a [`RwLock`](crate::RwLock): its writer, read as
/// [`Redlock::status`](crate::Redlock::status) reads a lock, and its live readers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockStatus {
    /// The write side: the lock key, held or free.
    pub writer: LockStatus,
    /// Every live reader that a node lists, the longest-lived first.
    pub readers: Vec<Reader>,
}

/// One reader of a read-write lock, as the nodes list it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reader {
    /// Who it is (its stored value, decoded).
    pub holder: HolderInfo,
    /// How many nodes list it: it holds the read lock when a majority do.
    pub nodes: usize,
    /// Its time left on the node that expires it last, by that node's clock.
    pub remaining: Duration,
}

impl RwLockStatus {
    /// The status as one JSON object: `{"writer": <the writer's status, as
    /// [`LockStatus::to_json`]>, "readers": [{"holder": {"token","host","pid","program",
    /// "since_ms"}, "nodes", "remaining_ms"}]}`, readers the longest-lived first.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(256 + 128 * self.readers.len());
        let mut o = JsonObject::new(&mut out);
        o.key("writer");
        o.out.push_str(&self.writer.to_json());
        o.array("readers", &self.readers, |out, reader| {
            let mut r = JsonObject::new(out);
            r.key("holder");
            status::holder_json(r.out, &reader.holder);
            r.num("nodes", Some(reader.nodes as i128));
            r.num("remaining_ms", Some(reader.remaining.as_millis() as i128));
            r.end();
        });
        o.end();
        out
    }
}

/// Reads the writer and the readers of read-write lock resource `resource` on every node,
/// the two reads at once.
pub(crate) async fn read_rw_status(
    ensemble: &Arc<Ensemble>,
    resource: &str,
) -> Result<RwLockStatus> {
    let key = status::status_key(ensemble, resource)?;
    let (writer, readers) = tokio::join!(
        status::read_status(ensemble, resource),
        read_readers(ensemble, key)
    );
    Ok(RwLockStatus {
        writer: status::writer_side(writer?),
        readers: readers?,
    })
}

/// The live readers of the read-write lock whose lock key is `key`, as every node lists
/// them.
async fn read_readers(ensemble: &Arc<Ensemble>, key: String) -> Result<Vec<Reader>> {
    let space = ensemble.config.space();
    let keys = [key];
    let ensemble = &ensemble.seated(&keys).await;
    let call = Call::script(&rw_scripts::READERS, space, &keys);
    let mut round = Round::everywhere(ensemble.round_scope(), call);
    let mut listed: Vec<Vec<(String, u64)>> = Vec::new();
    answers::report_every_answer(
        &ensemble.nodes,
        &mut round,
        |_, answer| match live_readers(answer) {
            Ok(readers) => {
                listed.push(readers);
                NodeOutcome::Reachable
            }
            Err(failed) => failed,
        },
    )
    .await?;
    Ok(merged(listed))
}

/// The readers script's reply: each live reader's value and milliseconds left.
fn live_readers(answer: Value) -> std::result::Result<Vec<(String, u64)>, NodeOutcome> {
    let (now, readers) = reply::decode::<(i64, Vec<(String, i64)>)>(answer)?;
    let left = |expiry: i64| u64::try_from(expiry.saturating_sub(now)).unwrap_or(0);
    Ok(readers.into_iter().map(|(v, e)| (v, left(e))).collect())
}

/// The readers of every node, each once: on how many nodes, and its longest time left.
fn merged(listed: Vec<Vec<(String, u64)>>) -> Vec<Reader> {
    let mut by_value: HashMap<String, (usize, u64)> = HashMap::new();
    for (value, left) in listed.into_iter().flatten() {
        let entry = by_value.entry(value).or_insert((0, 0));
        *entry = (entry.0 + 1, entry.1.max(left));
    }
    let mut readers: Vec<Reader> = (by_value.into_iter())
        .map(|(value, (nodes, left))| Reader {
            holder: HolderInfo::parse(&value),
            nodes,
            remaining: Duration::from_millis(left),
        })
        .collect();
    readers.sort_by_key(|r| std::cmp::Reverse(r.remaining));
    readers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_are_merged_across_nodes_longest_first() {
        let node = |r: &[(&str, u64)]| r.iter().map(|(v, l)| ((*v).to_owned(), *l)).collect();
        let merged = merged(vec![
            node(&[("a", 100), ("b", 900)]),
            node(&[("a", 300)]),
            node(&[]),
        ]);
        let seen: Vec<(&str, usize, u64)> = (merged.iter())
            .map(|r| {
                (
                    r.holder.token.as_str(),
                    r.nodes,
                    r.remaining.as_millis() as u64,
                )
            })
            .collect();
        assert_eq!(seen, vec![("b", 1, 900), ("a", 2, 300)]);
    }

    #[test]
    fn a_reply_that_is_not_a_readers_list_is_a_failure() {
        assert!(live_readers(Value::Nil).is_err());
        let ok = Value::Array(vec![
            Value::Int(1000),
            Value::Array(vec![
                Value::BulkString(b"r".to_vec()),
                Value::BulkString(b"1500".to_vec()),
            ]),
        ]);
        assert_eq!(live_readers(ok), Ok(vec![("r".to_owned(), 500)]));
    }
}
