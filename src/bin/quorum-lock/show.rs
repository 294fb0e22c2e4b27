//! Rendering of `status` for people (a table) and for scripts (one line of JSON).

use std::fmt::Write as _;
use std::time::Duration;

use quorum_lock::{Holder, HolderInfo, KeyState, LockStatus, Reader, Verdict, Waiter};

use crate::duration::human;

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

/// Who holds a lock, for people: `host:pid (program) for 3.2s`, parts left out when the
/// value does not carry them; another client's value is `owner <first digits>`.
pub(crate) fn holder_text(info: &HolderInfo, held_for: Option<Duration>) -> String {
    if info.is_readers() {
        return "readers (see status --shared)".to_owned();
    }
    if info.is_permits() {
        return "the permit holders of the semaphore of this name".to_owned();
    }
    let mut out = match (&info.host, info.pid) {
        (Some(host), Some(pid)) => format!("{host}:{pid}"),
        (Some(host), None) => host.clone(),
        (None, Some(pid)) => format!("pid {pid}"),
        (None, None) => format!("owner {}", prefix(&info.token)),
    };
    if let Some(program) = &info.program {
        let _ = write!(out, " ({program})");
    }
    if let Some(held) = held_for.filter(|_| info.since.is_some()) {
        let _ = write!(out, " for {}", human(held));
    }
    out
}

/// The readers of a read-write lock, one line each after a count: who, on how many of
/// `nodes` nodes (a reader holds on `quorum` of them), and for how long at most.
pub(crate) fn readers_text(readers: &[Reader], nodes: usize, quorum: usize) -> String {
    let holding = readers.iter().filter(|r| r.nodes >= quorum).count();
    let mut out = format!("readers: {holding} on a majority");
    if readers.len() > holding {
        let _ = write!(out, ", {} on fewer nodes", readers.len() - holding);
    }
    out.push('\n');
    for reader in readers {
        let held_for = (reader.holder.since)
            .and_then(|since| std::time::SystemTime::now().duration_since(since).ok());
        let _ = writeln!(
            out,
            "  {}, on {} of {nodes} nodes, valid for at most {} more",
            holder_text(&reader.holder, held_for),
            reader.nodes,
            human(reader.remaining)
        );
    }
    out
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
            if let Some(info) = &status.holder {
                let _ = write!(out, "\nheld by {}", holder_text(info, status.held_for));
                if !info.is_described() {
                    out.push_str(" (a value from another client: no holder details)");
                }
                if let Some(left) = status.remaining {
                    let _ = write!(out, ", valid for at most {} more", human(left));
                }
            }
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
    out.push_str(&waiters_text(&status.waiters));
    out
}

/// The clients waiting for a lock, in the order releases wake them, one line each: who,
/// since when (the listing node's clock against this machine's), on which node's list.
/// Empty when nobody waits.
fn waiters_text(waiters: &[Waiter]) -> String {
    if waiters.is_empty() {
        return String::new();
    }
    let mut out = format!("waiting: {}\n", waiters.len());
    for (i, waiter) in waiters.iter().enumerate() {
        let who = match waiter.client.is_described() {
            true => holder_text(&waiter.client, None),
            false => format!("client {}", prefix(&waiter.client.token)),
        };
        let _ = write!(out, "  {}. {who}", i + 1);
        if let Some(waited) =
            (waiter.listed_at).and_then(|at| std::time::SystemTime::now().duration_since(at).ok())
        {
            let _ = write!(out, ", listed {} ago", human(waited));
        }
        let _ = writeln!(out, " on {}", waiter.node);
    }
    out
}

/// How long until enough copies of `token` have expired for another owner to find a
/// majority free, unless the holder extends it: the `k`-th shortest TTL among the nodes
/// holding it, `k` being how many more free nodes a majority needs. `None` when unknown.
fn frees_in(holders: &[Option<&Holder>], quorum: usize, token: &str) -> Option<Duration> {
    let free = holders
        .iter()
        .filter(|h| matches!(h, Some(Holder::Free)))
        .count();
    let mut ttls: Vec<Duration> = holders
        .iter()
        .filter_map(|h| match h {
            Some(Holder::Token { token: t, ttl }) if t == token => *ttl,
            _ => None,
        })
        .collect();
    ttls.sort_unstable();
    let more = quorum.checked_sub(free)?.checked_sub(1)?;
    ttls.get(more).copied()
}

/// The progress line of a wait for a lock (see `progress`), and a key that changes when the
/// holder does.
pub(crate) fn waiting(status: &LockStatus, waited: Duration) -> (String, String) {
    let holders: Vec<Option<&Holder>> = status.nodes.iter().map(|n| n.holder.as_ref()).collect();
    let holder = (status.holder.as_ref()).map(|info| holder_text(info, status.held_for));
    waiting_line(
        &status.resource,
        &status.verdict,
        holder,
        &holders,
        status.quorum,
        waited,
    )
}

fn waiting_line(
    resource: &str,
    verdict: &Verdict,
    holder: Option<String>,
    holders: &[Option<&Holder>],
    quorum: usize,
    waited: Duration,
) -> (String, String) {
    let who = match verdict {
        Verdict::Held { token } => {
            let until = match frees_in(holders, quorum, token) {
                Some(left) => format!(", its key expires in {} unless it is extended", human(left)),
                None => String::new(),
            };
            let holder = holder.unwrap_or_else(|| format!("owner {}", prefix(token)));
            format!("held by {holder}{until}")
        }
        Verdict::Free => "nobody holds it right now; trying again".to_owned(),
        Verdict::Split => {
            "no owner holds it on a majority right now (a lock is being taken or given up)"
                .to_owned()
        }
        _ => "too few nodes answered to tell who holds it".to_owned(),
    };
    let key = match verdict {
        Verdict::Held { token } => format!("held {token}"),
        other => other.as_str().to_owned(),
    };
    let line = format!("waiting for {resource:?} ({} so far): {who}", human(waited));
    (key, line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_prefix_is_char_safe() {
        assert_eq!(prefix("0123456789abcdef"), "01234567");
        assert_eq!(prefix("abc"), "abc");
        assert_eq!(prefix("ééééééééé"), "éééééééé");
    }

    #[test]
    fn holders_are_named_by_what_their_value_carries() {
        let ms = Duration::from_millis;
        let t = "0123456789abcdef0123456789abcdef";
        let cases = [
            (
                format!("{t};q1;t=5;h=web-1;p=42;n=backup.sh"),
                "web-1:42 (backup.sh) for 3.2s",
            ),
            (format!("{t};q1;t=5;p=42"), "pid 42 for 3.2s"),
            (format!("{t};q1;t=5;h=web-1"), "web-1 for 3.2s"),
            // Holder details left out (`holder_info(false)`): the token and the time.
            (format!("{t};q1;t=5"), "owner 01234567 for 3.2s"),
            // Another client's value: no time either, even if one is passed.
            ("b5a2f6a0-3e1d".to_owned(), "owner b5a2f6a0"),
        ];
        for (value, expected) in cases {
            let info = HolderInfo::parse(&value);
            assert_eq!(holder_text(&info, Some(ms(3200))), expected, "{value}");
        }
    }

    #[test]
    fn waiting_says_who_holds_it_and_until_when() {
        let ms = Duration::from_millis;
        let tok = |t: &str, ttl: u64| Holder::Token {
            token: t.into(),
            ttl: Some(ms(ttl)),
        };
        let (a1, a2, a3, b, free) = (
            tok("0123456789abcdef", 9000),
            tok("0123456789abcdef", 12_400),
            tok("0123456789abcdef", 12_600),
            tok("other", 30_000),
            Holder::Free,
        );
        let held = Verdict::Held {
            token: "0123456789abcdef".into(),
        };
        // Three copies, no free node: a majority of 3 is free once two have expired.
        let (key, line) = waiting_line(
            "jobs",
            &held,
            None,
            &[Some(&a1), Some(&a2), Some(&a3)],
            2,
            ms(3400),
        );
        assert_eq!(key, "held 0123456789abcdef");
        assert_eq!(
            line,
            "waiting for \"jobs\" (3.4s so far): held by owner 01234567, its key expires in \
             12.4s unless it is extended"
        );
        // One node free already: the first expiry is enough.
        let (_, line) = waiting_line(
            "jobs",
            &held,
            Some("web-1:4242 (backup.sh) for 3.2s".into()),
            &[Some(&a2), Some(&free), Some(&a1)],
            2,
            ms(1000),
        );
        assert_eq!(
            line,
            "waiting for \"jobs\" (1s so far): held by web-1:4242 (backup.sh) for 3.2s, its \
             key expires in 9s unless it is extended"
        );
        // A copy without a TTL tells nothing.
        let no_ttl = Holder::Token {
            token: "0123456789abcdef".into(),
            ttl: None,
        };
        let (_, line) = waiting_line(
            "jobs",
            &held,
            None,
            &[Some(&no_ttl), Some(&no_ttl), None],
            2,
            ms(1000),
        );
        assert!(line.ends_with("held by owner 01234567"), "{line}");
        let (key, line) = waiting_line(
            "jobs",
            &Verdict::Split,
            None,
            &[Some(&a1), Some(&b), Some(&free)],
            2,
            ms(2000),
        );
        assert_eq!(key, "split");
        assert!(
            line.ends_with("(a lock is being taken or given up)"),
            "{line}"
        );
        let (key, _) = waiting_line("jobs", &Verdict::Free, None, &[Some(&free)], 1, ms(2000));
        assert_eq!(key, "free");
        let (_, line) = waiting_line(
            "jobs",
            &Verdict::Unknown,
            None,
            &[None, None, None],
            2,
            ms(2000),
        );
        assert!(
            line.ends_with("too few nodes answered to tell who holds it"),
            "{line}"
        );
    }
}
