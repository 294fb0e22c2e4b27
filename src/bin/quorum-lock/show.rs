//! Rendering of `status` for people (a table) and for scripts (one line of JSON).

use std::fmt::Write as _;
use std::time::Duration;

use quorum_lock::{Holder, KeyState, LockStatus, Verdict};

/// How many characters of an owner token the table shows.
const TOKEN_PREFIX: usize = 8;

fn prefix(token: &str) -> &str {
    token
        .char_indices()
        .nth(TOKEN_PREFIX)
        .map_or(token, |(i, _)| &token[..i])
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// `[key, ttl, owner, note]` cells for one node.
fn cells(state: &KeyState) -> [String; 4] {
    let dash = || "-".to_owned();
    match &state.holder {
        None => [
            "?".into(),
            dash(),
            dash(),
            state
                .error
                .clone()
                .unwrap_or_else(|| "no answer".to_owned()),
        ],
        Some(Holder::Free) => ["absent".into(), dash(), dash(), String::new()],
        Some(Holder::Token { token, ttl }) => [
            "exists".into(),
            ttl.map_or_else(|| "none".to_owned(), seconds),
            prefix(token).to_owned(),
            if ttl.is_none() {
                "no expiry: not set by a lock".to_owned()
            } else {
                String::new()
            },
        ],
        Some(Holder::Foreign(kind)) => [
            "exists".into(),
            dash(),
            dash(),
            format!("a {kind}, not a lock"),
        ],
        Some(_) => ["exists".into(), dash(), dash(), "unrecognised".into()],
    }
}

/// The table: a verdict line, then one line per node.
pub(crate) fn status_text(status: &LockStatus, quorum: usize) -> String {
    let mut out = String::new();
    let answered = status.nodes.iter().filter(|n| n.holder.is_some()).count();
    let _ = write!(out, "{}: {}", status.resource, status.verdict);
    match &status.verdict {
        Verdict::Held { token } => {
            let votes = status
                .nodes
                .iter()
                .filter(|n| matches!(&n.holder, Some(Holder::Token { token: t, .. }) if t == token))
                .count();
            let _ = write!(
                out,
                " (owner {}, on {votes} of {} nodes)",
                prefix(token),
                status.nodes.len()
            );
        }
        _ => {
            let _ = write!(
                out,
                " ({answered} of {} nodes answered, {quorum} needed)",
                status.nodes.len()
            );
        }
    }
    out.push('\n');
    let _ = writeln!(out, "key {:?}", status.key);
    let header = ["NODE", "KEY", "TTL", "OWNER"];
    let rows: Vec<[String; 5]> = status
        .nodes
        .iter()
        .map(|n| {
            let [key, ttl, owner, note] = cells(n);
            [n.node.clone(), key, ttl, owner, note]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let [w0, w1, w2, w3] = widths;
    let _ = writeln!(
        out,
        "  {:<w0$}  {:<w1$}  {:<w2$}  {}",
        header[0], header[1], header[2], header[3]
    );
    for [node, key, ttl, owner, note] in &rows {
        let line = format!("  {node:<w0$}  {key:<w1$}  {ttl:<w2$}  {owner:<w3$}  {note}");
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// One line of JSON:
/// `{"resource":…,"key":…,"quorum":…,"verdict":"held"|"free"|"split"|"unknown","owner":…,
/// "nodes":[{"node":…,"reachable":…,"exists":…,"type":…,"ttl_ms":…,"owner":…,"error":…}]}`.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_prefix_is_char_safe() {
        assert_eq!(prefix("0123456789abcdef"), "01234567");
        assert_eq!(prefix("abc"), "abc");
        assert_eq!(prefix("ééééééééé"), "éééééééé");
    }
}
