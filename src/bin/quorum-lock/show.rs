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

/// The verdict word scripts match on.
fn verdict_name(v: &Verdict) -> &'static str {
    match v {
        Verdict::Held { .. } => "held",
        Verdict::Free => "free",
        Verdict::Split => "split",
        Verdict::Unknown => "unknown",
        // `Verdict` is non-exhaustive: a future verdict is not a held lock.
        _ => "unknown",
    }
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
pub(crate) fn status_json(status: &LockStatus, quorum: usize) -> String {
    let mut out = String::from("{");
    field_str(&mut out, "resource", Some(&status.resource));
    out.push(',');
    field_str(&mut out, "key", Some(&status.key));
    let _ = write!(out, ",\"quorum\":{quorum},");
    field_str(&mut out, "verdict", Some(verdict_name(&status.verdict)));
    out.push(',');
    let owner = match &status.verdict {
        Verdict::Held { token } => Some(token.as_str()),
        _ => None,
    };
    field_str(&mut out, "owner", owner);
    out.push_str(",\"nodes\":[");
    for (i, n) in status.nodes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let (exists, kind, ttl, token) = match &n.holder {
            None => (None, None, None, None),
            Some(Holder::Free) => (Some(false), None, None, None),
            Some(Holder::Token { token, ttl }) => {
                (Some(true), Some("string"), *ttl, Some(token.as_str()))
            }
            Some(Holder::Foreign(kind)) => (Some(true), Some(kind.as_str()), None, None),
            Some(_) => (Some(true), None, None, None),
        };
        out.push('{');
        field_str(&mut out, "node", Some(&n.node));
        let _ = write!(out, ",\"reachable\":{},\"exists\":", n.holder.is_some());
        match exists {
            Some(b) => {
                let _ = write!(out, "{b}");
            }
            None => out.push_str("null"),
        }
        out.push(',');
        field_str(&mut out, "type", kind);
        out.push_str(",\"ttl_ms\":");
        match ttl {
            Some(d) => {
                let _ = write!(out, "{}", d.as_millis());
            }
            None => out.push_str("null"),
        }
        out.push(',');
        field_str(&mut out, "owner", token);
        out.push(',');
        field_str(&mut out, "error", n.error.as_deref());
        out.push('}');
    }
    out.push_str("]}");
    out
}

fn field_str(out: &mut String, name: &str, value: Option<&str>) {
    json_str(out, name);
    out.push(':');
    match value {
        Some(v) => json_str(out, v),
        None => out.push_str("null"),
    }
}

fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let mut out = String::new();
        json_str(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(out, r#""a\"b\\c\nd\u0001é""#);
    }

    #[test]
    fn token_prefix_is_char_safe() {
        assert_eq!(prefix("0123456789abcdef"), "01234567");
        assert_eq!(prefix("abc"), "abc");
        assert_eq!(prefix("ééééééééé"), "éééééééé");
    }
}
