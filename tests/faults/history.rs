//! What the workers record, the checker that judges it, and the result table.
//!
//! Every time is on the common clock of [`super::clock`] (nanoseconds since the epoch).
//! A worker writes one line per hold, one per failed `lock()` call and one summary line
//! when it stops; [`parse`] reads them back.
//!
//! The checker ([`check`]) fails a history on:
//! - **overlaps**: two holds of the resource whose protected intervals intersect (for a
//!   semaphore of K permits, a hold acquired while K others still held). A hold
//!   protects `[acquired, min(end, deadline)]`: from the moment `lock()` returned to the
//!   moment its holder began releasing, cut at its validity deadline. The release's start
//!   is taken before the release is sent and `acquired` after the lock was granted, so any
//!   real ordering is never reported as an overlap; the only slack is the clock anchors'
//!   uncertainty, used as the tolerance;
//! - **late writes**: a counter write acknowledged after its holder's deadline (it may have
//!   landed after the lock passed to someone else) and accepted by the storage;
//! - **lost updates**: a final counter other than the number of accepted increments;
//! - **token regressions**: with fencing, a hold whose token is not larger than the token of
//!   every hold acquired before it (acquisition order on the common clock; the table's
//!   `tokens↑` column);
//! - a wall-clock step during the run (the run's times cannot be compared).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

/// One counter write made under a hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// Just before the write was sent.
    pub sent: u64,
    /// When its acknowledgement arrived.
    pub acked: u64,
    /// False when the storage refused it (fenced off by a newer token).
    pub accepted: bool,
    /// The value written.
    pub value: i64,
}

/// One successful acquisition and what its holder did with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub worker: u32,
    pub seq: u32,
    /// When the `lock()` call began (it may have retried).
    pub start: u64,
    /// When `lock()` returned the guard.
    pub acquired: u64,
    /// The guard's validity deadline.
    pub deadline: u64,
    /// When the counter was read (read-modify-write), if it was.
    pub read: Option<u64>,
    pub write: Option<Write>,
    /// When the holder began to release (or stopped acting, if it never released).
    pub end: u64,
    /// When the release returned.
    pub released: u64,
    pub token: Option<u64>,
    /// `ok`, `not-held`, `unavailable`, `none`, ...
    pub release: String,
}

impl Hold {
    /// End of the protected interval.
    pub fn protected_end(&self) -> u64 {
        self.end.min(self.deadline)
    }

    pub fn to_line(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        let (sent, acked, ok, value) = match &self.write {
            Some(w) => (
                w.sent.to_string(),
                w.acked.to_string(),
                u8::from(w.accepted).to_string(),
                w.value.to_string(),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        format!(
            "hold w={} seq={} start={} acq={} dl={} read={} sent={} ack={} ok={} val={} end={} rel={} tok={} relout={}",
            self.worker,
            self.seq,
            self.start,
            self.acquired,
            self.deadline,
            opt(self.read),
            sent,
            acked,
            ok,
            value,
            self.end,
            self.released,
            opt(self.token),
            self.release
        )
    }
}

/// A `lock()` call that gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub worker: u32,
    pub start: u64,
    pub end: u64,
    pub why: String,
}

impl Failure {
    pub fn to_line(&self) -> String {
        format!(
            "fail w={} start={} end={} why={}",
            self.worker, self.start, self.end, self.why
        )
    }
}

/// A worker's closing line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Done {
    pub worker: u32,
    pub increments: u64,
    /// Clock anchor uncertainty of the worker process (ns).
    pub clock_err: u64,
    /// Wall-clock step seen by the worker during its run (ns).
    pub clock_step: i64,
}

impl Done {
    pub fn to_line(&self) -> String {
        format!(
            "done w={} incr={} clock_err={} clock_step={}",
            self.worker, self.increments, self.clock_err, self.clock_step
        )
    }
}

/// Everything a run recorded.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub holds: Vec<Hold>,
    pub failures: Vec<Failure>,
    pub done: Vec<Done>,
}

fn fields(line: &str) -> HashMap<&str, &str> {
    line.split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

fn num<T: std::str::FromStr>(f: &HashMap<&str, &str>, key: &str, line: &str) -> T {
    f.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("bad or missing `{key}` in record: {line}"))
}

fn opt_num<T: std::str::FromStr>(f: &HashMap<&str, &str>, key: &str, line: &str) -> Option<T> {
    match f.get(key) {
        Some(&"-") => None,
        _ => Some(num(f, key, line)),
    }
}

/// Appends the records in `text` (lines written by workers) to `history`.
pub fn parse(text: &str, history: &mut History) {
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let f = fields(line);
        match line.split_whitespace().next() {
            Some("hold") => {
                let write = opt_num::<u64>(&f, "sent", line).map(|sent| Write {
                    sent,
                    acked: num(&f, "ack", line),
                    accepted: num::<u8>(&f, "ok", line) == 1,
                    value: num(&f, "val", line),
                });
                history.holds.push(Hold {
                    worker: num(&f, "w", line),
                    seq: num(&f, "seq", line),
                    start: num(&f, "start", line),
                    acquired: num(&f, "acq", line),
                    deadline: num(&f, "dl", line),
                    read: opt_num(&f, "read", line),
                    write,
                    end: num(&f, "end", line),
                    released: num(&f, "rel", line),
                    token: opt_num(&f, "tok", line),
                    release: f.get("relout").copied().unwrap_or("none").to_owned(),
                });
            }
            Some("fail") => history.failures.push(Failure {
                worker: num(&f, "w", line),
                start: num(&f, "start", line),
                end: num(&f, "end", line),
                why: f.get("why").copied().unwrap_or("?").to_owned(),
            }),
            Some("done") => history.done.push(Done {
                worker: num(&f, "w", line),
                increments: num(&f, "incr", line),
                clock_err: num(&f, "clock_err", line),
                clock_step: num(&f, "clock_step", line),
            }),
            _ => panic!("unknown record: {line}"),
        }
    }
}

/// The checker's findings for one history and final counter.
#[derive(Clone, Debug, Default)]
pub struct Check {
    pub holds: usize,
    /// Pairs of holds (indices into the history) whose protected intervals intersect, with
    /// the length of the intersection in ns.
    pub overlaps: Vec<(usize, usize, u64)>,
    /// Accepted writes acknowledged after their holder's deadline.
    pub late_writes: usize,
    /// Writes the storage refused (fenced off).
    pub rejected: usize,
    /// Holds that carried a fencing token.
    pub tokens: usize,
    /// Holds (in acquisition order) whose fencing token is not larger than every token of
    /// an earlier hold: with strictly increasing tokens, 0.
    pub token_regressions: usize,
    pub counter: i64,
    /// Accepted increments: what the counter must read.
    pub expected: i64,
    /// Largest wall-clock step a process saw (ns).
    pub clock_step: i64,
    /// Tolerance used for overlaps (ns).
    pub tolerance: u64,
}

/// Judges `history` against the final `counter`. `parent_err` is the clock uncertainty of
/// the process that recorded holds itself (0 if none did).
pub fn check(history: &History, counter: i64, parent_err: u64) -> Check {
    check_permits(history, counter, parent_err, 1)
}

/// [`check`] for holds of one of `permits` permits: an overlap is a hold acquired while
/// `permits` others still held (with one permit, any two holds that intersect).
pub fn check_permits(history: &History, counter: i64, parent_err: u64, permits: usize) -> Check {
    check_with(history, counter, parent_err, |sharing: &[usize], _| {
        sharing.len() >= permits
    })
}

/// [`check`] for a read-write lock whose workers `is_reader` says read: an overlap is a
/// hold that shares time with another where either of them writes.
pub fn check_rw(
    history: &History,
    counter: i64,
    parent_err: u64,
    is_reader: impl Fn(u32) -> bool,
) -> Check {
    let writes = |h: &Hold| !is_reader(h.worker);
    check_with(history, counter, parent_err, |sharing: &[usize], j| {
        let holds = &history.holds;
        (sharing.iter()).any(|&i| writes(&holds[i]) || writes(&holds[j]))
    })
}

/// The checker: `conflict(sharing, j)` says whether hold `j`, acquired while the holds
/// `sharing` still held (by more than the tolerance), overlaps them.
fn check_with(
    history: &History,
    counter: i64,
    parent_err: u64,
    conflict: impl Fn(&[usize], usize) -> bool,
) -> Check {
    let err_of: HashMap<u32, u64> = history
        .done
        .iter()
        .map(|d| (d.worker, d.clock_err))
        .collect();
    let max_err = err_of.values().copied().max().unwrap_or(0).max(parent_err);
    let tolerance = 2 * max_err;
    let mut order: Vec<usize> = (0..history.holds.len()).collect();
    order.sort_by_key(|&i| history.holds[i].acquired);

    // Sweep in acquisition order, keeping the holds whose protected interval is still open.
    let mut overlaps = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for &j in &order {
        let b = &history.holds[j];
        open.retain(|&i| history.holds[i].protected_end() > b.acquired);
        // Every open hold contains `b.acquired`: those that share more than the tolerance
        // with `b` are held with it at once.
        let sharing: Vec<(usize, u64)> = (open.iter())
            .map(|&i| {
                let end = history.holds[i].protected_end().min(b.protected_end());
                (i, end.saturating_sub(b.acquired))
            })
            .filter(|&(_, shared)| shared > tolerance)
            .collect();
        let sharing_holds: Vec<usize> = sharing.iter().map(|&(i, _)| i).collect();
        if !sharing.is_empty() && conflict(&sharing_holds, j) {
            overlaps.extend(sharing.into_iter().map(|(i, shared)| (i, j, shared)));
        }
        open.push(j);
    }

    let mut late_writes = 0;
    let mut rejected = 0;
    let mut expected = 0;
    for h in &history.holds {
        if let Some(w) = &h.write {
            if w.accepted {
                expected += 1;
                if w.acked > h.deadline + tolerance {
                    late_writes += 1;
                }
            } else {
                rejected += 1;
            }
        }
    }
    let tokens: Vec<u64> = order
        .iter()
        .filter_map(|&i| history.holds[i].token)
        .collect();
    let token_regressions = token_regressions(&tokens);
    let clock_step = history
        .done
        .iter()
        .map(|d| d.clock_step.abs())
        .max()
        .unwrap_or(0);
    Check {
        holds: history.holds.len(),
        overlaps,
        late_writes,
        rejected,
        tokens: tokens.len(),
        token_regressions,
        counter,
        expected,
        clock_step,
        tolerance,
    }
}

/// How many of `tokens` (in acquisition order) are not larger than every token before them.
/// Compared with the running maximum, not only with the previous token: in `5, 3, 4` both
/// `3` and `4` came after a holder with a larger token.
pub fn token_regressions(tokens: &[u64]) -> usize {
    let mut highest: Option<u64> = None;
    let mut regressions = 0;
    for &t in tokens {
        if highest.is_some_and(|h| t <= h) {
            regressions += 1;
        }
        highest = highest.max(Some(t));
    }
    regressions
}

/// Largest wall-clock step (ns) the checker accepts in a run.
pub const MAX_CLOCK_STEP_NS: i64 = 1_000_000;

/// The judgement of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No overlap, no late write, the counter is exact.
    Safe,
    /// The lock was violated (overlap or late write), but every stale write was refused by
    /// the storage thanks to fencing tokens, and the counter is exact.
    Fenced,
    /// A violation got through: an overlap without fencing, an accepted late write, a lost
    /// update or a token regression.
    Unsafe,
    /// The run cannot be judged (the host's wall clock stepped).
    Invalid,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Safe => "SAFE",
            Verdict::Fenced => "FENCED",
            Verdict::Unsafe => "UNSAFE",
            Verdict::Invalid => "INVALID",
        })
    }
}

impl Check {
    pub fn verdict(&self, fencing: bool) -> Verdict {
        if self.clock_step > MAX_CLOCK_STEP_NS {
            return Verdict::Invalid;
        }
        let lock_violated = !self.overlaps.is_empty() || self.late_writes > 0 || self.rejected > 0;
        let data_lost =
            self.counter != self.expected || self.late_writes > 0 || self.token_regressions > 0;
        if data_lost || (lock_violated && !fencing) {
            Verdict::Unsafe
        } else if lock_violated {
            Verdict::Fenced
        } else {
            Verdict::Safe
        }
    }

    /// The first overlap, described for a failure message.
    pub fn describe_overlap(&self, history: &History) -> Option<String> {
        let &(i, j, ns) = self.overlaps.first()?;
        let (a, b) = (&history.holds[i], &history.holds[j]);
        Some(format!(
            "worker {} hold #{} [{} .. {}] and worker {} hold #{} [{} .. {}] share {:?}",
            a.worker,
            a.seq,
            a.acquired,
            a.protected_end(),
            b.worker,
            b.seq,
            b.acquired,
            b.protected_end(),
            Duration::from_nanos(ns)
        ))
    }
}

/// How fast locks were granted again once the ensemble had recovered from its faults, for
/// the rows that measure it; the table's `refused`, `→plain`, `→fenced` and `gap` columns.
/// The liveness rows (`super::liveness`) recover at settling points (a majority of nodes
/// serving for the longest quarantine), the nemesis runs with plain and fenced workers
/// (`super::nemesis`) once each fault healed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Live {
    /// `lock()` calls begun after a recovery that gave up.
    pub refused: usize,
    /// The longest time from a recovery to the first plain lock granted after it;
    /// `None` when one recovery saw none.
    pub to_plain: Option<Duration>,
    /// The same for fenced locks.
    pub to_fenced: Option<Duration>,
    /// The longest time without any grant over the whole row; `None`: not measured.
    pub longest_gap: Option<Duration>,
}

impl Live {
    fn cell(d: Option<Duration>) -> String {
        d.map_or_else(|| "none".to_owned(), |d| format!("{:.2}s", d.as_secs_f64()))
    }
}

/// One line of a result table.
#[derive(Clone, Debug)]
pub struct Row {
    pub scenario: String,
    pub holds: usize,
    /// Acquisitions while a fault was in place (`None`: no fault windows).
    pub during_faults: Option<usize>,
    pub overlaps: usize,
    pub late: usize,
    pub rejected: usize,
    /// Holds that carried a fencing token (0: no fencing in this row).
    pub tokens: usize,
    /// Of those, how many were not larger than every earlier token (see [`Check`]).
    pub token_regressions: usize,
    pub counter: i64,
    pub expected: i64,
    pub verdict: Verdict,
    /// The verdict the scenario must reach.
    pub want: Verdict,
    /// Liveness figures, for the rows that measure them.
    pub live: Option<Live>,
    /// Long holders that lost their lock, and how many there were (the `lost` column),
    /// for the rows that have them.
    pub holders_lost: Option<(usize, usize)>,
    pub secs: f64,
    /// Other facts worth a glance (refusals, progress, seed).
    pub notes: String,
    /// Everything that makes this row fail, besides a verdict other than `want`.
    pub problems: Vec<String>,
    /// Progress the run should have made and did not (also failures, but timing-dependent:
    /// a run with only these is retried once, see `nemesis::run`).
    pub liveness: Vec<String>,
}

impl Row {
    pub fn from_check(scenario: &str, check: &Check, fencing: bool, want: Verdict) -> Row {
        Row {
            scenario: scenario.to_owned(),
            holds: check.holds,
            during_faults: None,
            overlaps: check.overlaps.len(),
            late: check.late_writes,
            rejected: check.rejected,
            tokens: check.tokens,
            token_regressions: check.token_regressions,
            counter: check.counter,
            expected: check.expected,
            verdict: check.verdict(fencing),
            want,
            live: None,
            holders_lost: None,
            secs: 0.0,
            notes: String::new(),
            problems: Vec::new(),
            liveness: Vec::new(),
        }
    }

    pub fn ok(&self) -> bool {
        self.verdict == self.want && self.problems.is_empty() && self.liveness.is_empty()
    }

    /// The `tokens↑` cell: `-` without tokens, `yes` when every token was larger than all
    /// earlier ones, `NO(k)` with `k` regressions.
    pub fn tokens_cell(&self) -> String {
        match (self.tokens, self.token_regressions) {
            (0, _) => "-".to_owned(),
            (_, 0) => "yes".to_owned(),
            (_, k) => format!("NO({k})"),
        }
    }

    /// Failed only for want of progress: safety held.
    pub fn only_liveness_failed(&self) -> bool {
        self.verdict == self.want && self.problems.is_empty() && !self.liveness.is_empty()
    }
}

/// Renders `rows` as a table under `title`, followed by every problem found.
pub fn table(title: &str, rows: &[Row]) -> String {
    let width = rows
        .iter()
        .map(|r| r.scenario.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let mut out = String::new();
    let _ = writeln!(out, "\n== {title} ==");
    let _ = writeln!(
        out,
        "{:<width$}  {:>5}  {:>6}  {:>8}  {:>4}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>6}  {:>5}  {:>7}  {:>8}  {:<7}  {:<7}  {:>5}  {:>5}  notes",
        "scenario",
        "holds",
        "during",
        "overlaps",
        "late",
        "fenced",
        "tokens↑",
        "refused",
        "→plain",
        "→fenced",
        "gap",
        "lost",
        "counter",
        "expected",
        "verdict",
        "want",
        "ok",
        "secs"
    );
    for r in rows {
        let during = r
            .during_faults
            .map_or_else(|| "-".to_owned(), |n| n.to_string());
        let (refused, to_plain, to_fenced, gap) = match &r.live {
            Some(live) => (
                live.refused.to_string(),
                Live::cell(live.to_plain),
                Live::cell(live.to_fenced),
                live.longest_gap
                    .map_or_else(|| "-".to_owned(), |g| Live::cell(Some(g))),
            ),
            None => (
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
            ),
        };
        let _ = writeln!(
            out,
            "{:<width$}  {:>5}  {:>6}  {:>8}  {:>4}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>6}  {:>5}  {:>7}  {:>8}  {:<7}  {:<7}  {:>5}  {:>5.1}  {}",
            r.scenario,
            r.holds,
            during,
            r.overlaps,
            r.late,
            r.rejected,
            r.tokens_cell(),
            refused,
            to_plain,
            to_fenced,
            gap,
            r.holders_lost
                .map_or_else(|| "-".to_owned(), |(lost, of)| format!("{lost}/{of}")),
            r.counter,
            r.expected,
            r.verdict.to_string(),
            r.want.to_string(),
            if r.ok() { "yes" } else { "NO" },
            r.secs,
            r.notes
        );
    }
    for r in rows {
        for p in r.problems.iter().chain(&r.liveness) {
            let _ = writeln!(out, "  {}: {p}", r.scenario);
        }
    }
    out
}

/// Prints the table and fails the test if any row is not ok.
pub fn report(title: &str, rows: &[Row]) {
    let text = table(title, rows);
    // One write, straight to stderr (past the test harness's output capture, so the table
    // shows in every `cargo test` log, not only with --nocapture), so parallel tests do not
    // interleave their tables.
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| !r.ok())
        .map(|r| r.scenario.as_str())
        .collect();
    assert!(
        failed.is_empty(),
        "scenarios failed: {failed:?} (see the table printed above)"
    );
}
