//! Scenario 6: how cost grows with scale, as curves (tables, fitted slopes and SVG plots):
//! (a) N = 1, 3, 5, 7, 9 nodes: p50, throughput, CPU and commands per cycle;
//! (b) 1 to 100 000 distinct resources held at once: throughput on more resources, client
//!     RSS and server memory;
//! (c) 2 to 256 waiters on one resource: wait p50/p99, commands per acquisition, rate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use tokio::time::Instant;

use crate::common::{Cluster, RedisServer, unique};
use crate::scenarios::contention::{Contention, contention_slice};
use crate::support::contender::{
    Contender, Held, Kind, Subject, defaults, floor_nodes, lock_contenders, quorum, selected,
};
use crate::support::fit::{describe, fmt_x};
use crate::support::measure::{
    Servers, Slices, interleaved, measure, servers_of, throughput, throughput_interleaved,
};
use crate::support::probe::probe_all;
use crate::support::stats::{commandstats_sum, delta, rss_kib, summarize, used_memory_sum};
use crate::support::svg::{Chart, Series};
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, QUORUM, RSLOCK, loadavg};

pub async fn run(cfg: Cfg) {
    let plots = Plots::new(cfg);
    nodes(cfg, &plots).await;
    held(cfg, &plots).await;
    waiters(cfg, &plots).await;
    println!("  plots of scenario 6: {}", plots.dir.display());
}

/// Where the plots go, and the line under each plot's title.
struct Plots {
    dir: PathBuf,
    subtitle: String,
}

/// The x axis of one part of the scenario, shared by its metrics.
struct XAxis {
    /// `6a`, `6b` or `6c`, and what x is, e.g. "by number of nodes".
    part: &'static str,
    by: &'static str,
    /// Said after every table's title, e.g. "(N = 3; ...)"; `Curves::detail` follows it.
    setup: String,
    /// The column heads are `head` then x; the fits' unit of x is `unit`.
    head: &'static str,
    unit: &'static str,
    label: &'static str,
    xs: Vec<f64>,
    log: bool,
}

/// One metric over an [`XAxis`]: a table row and a plotted line per contender, and the fit
/// of each line printed under the table.
struct Curves {
    /// The SVG's file name.
    file: &'static str,
    /// What is measured, e.g. "wait p99"; the table's title adds `detail`.
    title: &'static str,
    detail: String,
    unit: Unit,
    log_y: bool,
    series: Vec<Series>,
    notes: Vec<String>,
}

impl Curves {
    fn new(file: &'static str, title: &'static str, unit: Unit, series: Vec<Series>) -> Curves {
        Curves {
            file,
            title,
            detail: String::new(),
            unit,
            log_y: false,
            series,
            notes: Vec::new(),
        }
    }

    fn detail(mut self, detail: impl Into<String>) -> Curves {
        self.detail = detail.into();
        self
    }

    fn log_y(mut self) -> Curves {
        self.log_y = true;
        self
    }

    fn note(mut self, note: impl Into<String>) -> Curves {
        self.notes.push(note.into());
        self
    }

    fn notes(mut self, notes: Vec<String>) -> Curves {
        self.notes.extend(notes);
        self
    }
}

fn command_out(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Plots {
    /// `$PLOTS_DIR` if set, else `bench-plots/` next to BENCHMARKS.md for a full run and
    /// `target/bench-plots/` for a quick one (so a smoke run leaves the kept plots alone).
    fn new(cfg: Cfg) -> Plots {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = match std::env::var_os("PLOTS_DIR").filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d),
            None if cfg.quick => root.join("target").join("bench-plots"),
            None => root.join("bench-plots"),
        };
        let date = command_out("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
        let commit = command_out("git", &["describe", "--always", "--dirty"]);
        let subtitle = format!(
            "{}, commit {}, load average at start {}, {}",
            date.as_deref().unwrap_or("?"),
            commit.as_deref().unwrap_or("?"),
            loadavg(),
            if cfg.quick {
                "QUICK=1 (10x shorter)"
            } else {
                "full length"
            }
        );
        Plots { dir, subtitle }
    }

    /// Prints the table of `c` over `x` with the fit of every line, and writes its plot.
    fn emit(&self, x: &XAxis, c: Curves) {
        let heads: Vec<(String, Unit)> =
            x.xs.iter()
                .map(|v| (format!("{}{}", x.head, fmt_x(*v)), c.unit))
                .collect();
        let heads: Vec<(&str, Unit)> = heads.iter().map(|(h, u)| (h.as_str(), *u)).collect();
        let title = format!("Scenario {}: {} {}", x.part, c.title, x.by);
        let full: Vec<&str> = [title.as_str(), x.setup.as_str(), c.detail.as_str()]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        let mut t = Table::new(full.join(" "), &heads);
        for s in &c.series {
            let cells =
                s.ys.iter()
                    .map(|&y| {
                        if y.is_finite() {
                            Cell::Val(y)
                        } else {
                            Cell::Empty
                        }
                    })
                    .collect();
            t.row(s.name.as_str(), cells);
        }
        for s in &c.series {
            let fit = describe(&x.xs, &s.ys, x.unit, c.unit);
            t.note(format!("{}: {fit}", s.name));
        }
        for n in &c.notes {
            t.note(n.as_str());
        }
        let chart = Chart {
            title,
            subtitle: self.subtitle.clone(),
            x_label: x.label.to_string(),
            xs: x.xs.clone(),
            unit: c.unit,
            log_x: x.log,
            log_y: c.log_y,
            series: c.series,
        };
        match chart.write(&self.dir, c.file) {
            Ok(p) => t.note(format!("plot: {}", p.display())),
            Err(e) => t.note(format!("plot {} not written: {e}", c.file)),
        }
        print!("{}", t.render());
        println!();
    }
}

/// A row of NaN (nothing measured yet) per name, `len` wide.
fn blank(names: &[String], len: usize) -> Vec<Series> {
    names
        .iter()
        .map(|n| Series {
            name: n.clone(),
            ys: vec![f64::NAN; len],
        })
        .collect()
}

/// Commands per cycle on all nodes (`INFO commandstats`, calls inside scripts included)
/// over `cycles` sequential cycles of `s` on one resource.
async fn commands_per_cycle(
    s: &Subject,
    cycles: usize,
    admin: &mut [redis::Connection],
) -> BTreeMap<String, f64> {
    let Subject::Async(c) = s else {
        return BTreeMap::new();
    };
    let none: Servers = Arc::new([]);
    let before = commandstats_sum(admin);
    measure(c, &unique("s6-cmds"), 0, cycles, None, &none).await;
    // The answers past the majority (and a release's stragglers) land within this.
    tokio::time::sleep(Duration::from_millis(50)).await;
    delta(&before, &commandstats_sum(admin))
        .into_iter()
        .map(|(cmd, calls)| (cmd, calls as f64 / cycles.max(1) as f64))
        .collect()
}

/// Where one point of 6a is measured: N = `n`, column `j`.
#[derive(Clone, Copy)]
struct At {
    cfg: Cfg,
    n: usize,
    j: usize,
    how: Slices,
    warm: usize,
    iters: usize,
}

/// One column of 6a: starts `at.n` servers and fills column `at.j` of `rows` (p50, rate,
/// client CPU, server CPU, commands per cycle), one row per name in `names`.
async fn nodes_at(
    at: At,
    kinds: &[Kind],
    names: &[String],
    rows: &mut [&mut Vec<Series>; 5],
    notes: &mut Vec<String>,
) {
    let (n, j) = (at.n, at.j);
    let cluster = Cluster::start(n);
    let urls = cluster.urls();
    let servers = servers_of(&cluster);
    let mut admin: Vec<redis::Connection> = cluster.nodes.iter().map(RedisServer::conn).collect();
    let subjects = lock_contenders(&urls, kinds).await;
    let probed = probe_all(&subjects, &urls).await;
    if probed.contains("FAILED") {
        notes.push(format!("N = {n}: {probed}"));
    }
    let list: Vec<Subject> = subjects.iter().map(|(_, s)| s.clone()).collect();
    let lat = interleaved(&list, at.warm, at.iters, &servers).await;
    let tput = throughput_interleaved(&list, at.how, &servers).await;
    for (k, (name, s)) in subjects.iter().enumerate() {
        // With `ONLY`, rows are matched by name.
        let Some(i) = names.iter().position(|x| x == name) else {
            continue;
        };
        rows[0][i].ys[j] = summarize(lat[k].samples.clone()).p50.as_nanos() as f64;
        rows[1][i].ys[j] = tput[k].per_sec();
        if let Some((client, srv)) = tput[k].cpu_per_cycle() {
            rows[2][i].ys[j] = client.as_nanos() as f64;
            rows[3][i].ys[j] = srv.as_nanos() as f64;
        }
        if let Some(e) = lat[k].error_note(name) {
            notes.push(format!("N = {n}, one task: {e}"));
        }
        if let Some(e) = &tput[k].first_error {
            notes.push(format!(
                "N = {n}, {name}: {} failed cycles, first: {e}",
                tput[k].errors
            ));
        }
        let per = commands_per_cycle(s, at.cfg.n(500), &mut admin).await;
        rows[4][i].ys[j] = per.values().sum();
        let by: Vec<String> = per.iter().map(|(c, v)| format!("{c} {v:.2}")).collect();
        notes.push(format!("N = {n}, {name}: {}", by.join(", ")));
    }
}

/// (a) N = 1, 3, 5, 7, 9: p50 of one task, throughput of 16, CPU and commands per cycle.
async fn nodes(cfg: Cfg, plots: &Plots) {
    const COUNTS: [usize; 5] = [1, 3, 5, 7, 9];
    let kinds = [Kind::TwoRounds, Kind::Quorum, Kind::Rslock];
    let (warm, iters) = (cfg.n(200), cfg.n(2000));
    let how = Slices {
        tasks: 16,
        warm: cfg.d(Duration::from_millis(300)),
        slice_warm: cfg.d(Duration::from_millis(100)),
        dur: cfg.d(Duration::from_millis(1500)),
        slices: 3,
    };
    let names: Vec<String> = kinds.iter().map(|k| k.name().to_string()).collect();
    let [mut p50, mut rate, mut cpu, mut server_cpu, mut cmds] =
        std::array::from_fn(|_| blank(&names, COUNTS.len()));
    let mut notes = Vec::new();
    for (j, &n) in COUNTS.iter().enumerate() {
        let at = At {
            cfg,
            n,
            j,
            how,
            warm,
            iters,
        };
        let mut rows = [&mut p50, &mut rate, &mut cpu, &mut server_cpu, &mut cmds];
        nodes_at(at, &kinds, &names, &mut rows, &mut notes).await;
    }
    let x = XAxis {
        part: "6a",
        by: "by number of nodes",
        setup: String::new(),
        head: "N=",
        unit: "node",
        label: "nodes (N)",
        xs: COUNTS.iter().map(|&n| n as f64).collect(),
        log: false,
    };
    let one = format!(
        "(one task, {iters} cycles in interleaved rounds after {warm} warm-up; same resource)"
    );
    let many = format!(
        "({} tasks on their own resources, {:.1} s each in {} interleaved slices)",
        how.tasks,
        how.dur.as_secs_f64(),
        how.slices
    );
    let emit = |c: Curves| plots.emit(&x, c);
    emit(Curves::new("scale-nodes-p50.svg", "lock + unlock p50", Unit::Time, p50).detail(one));
    emit(Curves::new("scale-nodes-throughput.svg", "throughput", Unit::Rate, rate).detail(&many));
    emit(
        Curves::new(
            "scale-nodes-cpu.svg",
            "client CPU per cycle",
            Unit::Time,
            cpu,
        )
        .detail(&many)
        .note("CPU time of the whole client process / cycles"),
    );
    emit(
        Curves::new(
            "scale-nodes-server-cpu.svg",
            "server CPU per cycle",
            Unit::Time,
            server_cpu,
        )
        .detail(&many)
        .note("CPU time of all redis-servers / cycles"),
    );
    emit(
        Curves::new(
            "scale-nodes-commands.svg",
            "commands per cycle",
            Unit::Num(2),
            cmds,
        )
        .detail(format!("({} sequential cycles, one task)", cfg.n(500)))
        .note("INFO commandstats calls on all nodes (inside scripts too) / cycles, by command:")
        .notes(notes),
    );
}

/// Acquires `count` fresh resources with `c` for `ttl`, 64 at a time, onto `held`; returns
/// the failures (count, first).
async fn acquire_many(
    c: &Contender,
    count: usize,
    ttl: Duration,
    held: &mut Vec<Held>,
) -> (usize, Option<String>) {
    let got: Vec<Result<Held, String>> = stream::iter((0..count).map(|_| unique("s6-held")))
        .map(|res| async move { c.acquire_for(&res, ttl).await })
        .buffer_unordered(64)
        .collect()
        .await;
    let (mut errors, mut first) = (0, None);
    for g in got {
        match g {
            Ok(h) => held.push(h),
            Err(e) => {
                errors += 1;
                first.get_or_insert(e);
            }
        }
    }
    (errors, first)
}

/// The environment variable that makes the bench a child process measuring one
/// contender of scenario 6b: `<kind index>|<url>,<url>,...`.
pub const HELD_CHILD: &str = "QUORUM_LOCK_BENCH_HELD_CHILD";
/// The contenders of 6b, in table order.
const HELD_KINDS: [Kind; 3] = [Kind::Quorum, Kind::Rslock, Kind::TwoRounds];
/// Nodes of 6b.
const HELD_N: usize = 3;
/// Tasks cycling on other resources while the locks are held.
const HELD_TASKS: usize = 16;

fn held_levels(cfg: Cfg) -> Vec<usize> {
    [1, 10, 100, 1_000, 10_000, 100_000]
        .into_iter()
        .filter(|&l| !cfg.quick || l <= 10_000)
        .collect()
}

/// The part of 6b a child process runs: one contender fills up to each level and measures;
/// prints `level <index> <fill rate> <cycles/s> <RSS growth KiB> <server growth KiB>` per
/// level and `note <text>` lines, read by [`held`]. A fresh process per contender, so that
/// its RSS grows from a clean heap (freed memory stays with the allocator and would be
/// reused by the next contender).
pub async fn held_child(cfg: Cfg, spec: &str) {
    const HOLD_TTL: Duration = Duration::from_secs(600);
    let (kind, urls) = spec.split_once('|').expect("kind|urls");
    let kind = HELD_KINDS[kind.parse::<usize>().expect("kind index")];
    let urls: Vec<String> = urls.split(',').map(str::to_string).collect();
    let mut admin: Vec<redis::Connection> = urls
        .iter()
        .map(|u| {
            redis::Client::open(u.as_str())
                .and_then(|c| c.get_connection())
                .expect("admin connection")
        })
        .collect();
    let [(name, s)] = <[_; 1]>::try_from(lock_contenders(&urls, &[kind]).await)
        .unwrap_or_else(|_| panic!("one contender"));
    let Subject::Async(c) = &s else { return };
    let none: Servers = Arc::new([]);
    let (slice_warm, dur) = (
        cfg.d(Duration::from_millis(100)),
        cfg.d(Duration::from_secs(1)),
    );
    // The client's connections and first allocations come before the baseline.
    c.cycle(&unique("s6-warm")).await.expect("warm-up cycle");
    let (rss0, mem0) = (rss_kib().0, used_memory_sum(&mut admin));
    let mut held = Vec::new();
    for (j, &level) in held_levels(cfg).iter().enumerate() {
        let need = level.saturating_sub(held.len());
        let t = Instant::now();
        let (errors, first) = acquire_many(c, need, HOLD_TTL, &mut held).await;
        // A handful of acquisitions is no rate.
        let fill = if need >= 10 {
            need as f64 / t.elapsed().as_secs_f64()
        } else {
            f64::NAN
        };
        if let Some(e) = first {
            println!("note {name}, {level} held: {errors} acquisitions failed, first: {e}");
        }
        let rss = rss_kib().0 as f64 - rss0 as f64;
        let mem = (used_memory_sum(&mut admin) as f64 - mem0 as f64) / 1024.0;
        let r = throughput(&s, HELD_TASKS, slice_warm, dur, &none).await;
        if let Some(e) = &r.first_error {
            println!(
                "note {name}, {level} held: {} failed cycles, first: {e}",
                r.errors
            );
        }
        println!("level {j} {fill} {} {rss} {mem}", r.per_sec());
        if j + 1 == held_levels(cfg).len() {
            println!(
                "note {name}: {:.0} B of client RSS and {:.0} B of server memory (all {} nodes) \
                 per held lock at {} held",
                rss * 1024.0 / held.len().max(1) as f64,
                mem * 1024.0 / held.len().max(1) as f64,
                urls.len(),
                held.len()
            );
        }
    }
    let released: Vec<Result<(), String>> = stream::iter(held)
        .map(|h| c.release(h))
        .buffer_unordered(64)
        .collect()
        .await;
    let failed = released.iter().filter(|r| r.is_err()).count();
    if failed > 0 {
        println!("note {name}: {failed} releases failed");
    }
}

/// Runs [`held_child`] for contender `kind` of [`HELD_KINDS`] in a fresh process of this
/// bench and parses what it prints into `rows[metric][level]` and `notes`.
async fn held_in_child(
    cfg: Cfg,
    kind: usize,
    urls: &[String],
    rows: &mut [Vec<f64>; 4],
    notes: &mut Vec<String>,
) {
    let exe = std::env::current_exe().expect("bench executable");
    let out = tokio::process::Command::new(exe)
        .env(HELD_CHILD, format!("{kind}|{}", urls.join(",")))
        .env("QUICK", if cfg.quick { "1" } else { "0" })
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .expect("run the 6b child");
    let name = HELD_KINDS[kind].name();
    if !out.status.success() {
        notes.push(format!("{name}: the child process failed ({})", out.status));
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(note) = line.strip_prefix("note ") {
            notes.push(note.to_string());
        } else if let Some(rest) = line.strip_prefix("level ") {
            let v: Vec<f64> = rest
                .split_whitespace()
                .map(|f| f.parse().unwrap_or(f64::NAN))
                .collect();
            if let [j, values @ ..] = v.as_slice() {
                for (row, value) in rows.iter_mut().zip(values) {
                    if let Some(cell) = row.get_mut(*j as usize) {
                        *cell = *value;
                    }
                }
            }
        }
    }
}

/// (b) 1 to 100 000 resources held at once (10 000 with `QUICK`), N = 3: the throughput of
/// 16 tasks on more resources meanwhile, client RSS and server memory; each contender in
/// a child process of its own ([`held_child`]).
async fn held(cfg: Cfg, plots: &Plots) {
    let levels = held_levels(cfg);
    let dur = cfg.d(Duration::from_secs(1));
    let cluster = Cluster::start(HELD_N);
    let urls = cluster.urls();
    let kinds = selected(&HELD_KINDS);
    let names: Vec<String> = kinds.iter().map(|k| k.name().to_string()).collect();
    let [mut fill, mut rate, mut rss, mut mem] =
        std::array::from_fn(|_| blank(&names, levels.len()));
    let mut notes = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        let index = HELD_KINDS.iter().position(|k| k == kind).unwrap_or(0);
        let mut rows: [Vec<f64>; 4] = std::array::from_fn(|_| vec![f64::NAN; levels.len()]);
        held_in_child(cfg, index, &urls, &mut rows, &mut notes).await;
        let [f, r, m, s] = rows;
        (fill[i].ys, rate[i].ys, rss[i].ys, mem[i].ys) = (f, r, m, s);
    }
    drop(cluster);
    let x = XAxis {
        part: "6b",
        by: "by resources held at once",
        setup: format!("(N = {HELD_N})"),
        head: "",
        unit: "held lock",
        label: "resources held at once",
        xs: levels.iter().map(|&l| l as f64).collect(),
        log: true,
    };
    let emit = |c: Curves| plots.emit(&x, c);
    emit(
        Curves::new("scale-held-throughput.svg", "throughput", Unit::Rate, rate)
            .detail(format!(
                "({HELD_TASKS} tasks cycling on other resources for {:.1} s at each level)",
                dur.as_secs_f64()
            ))
            .note("each contender in a fresh child process, one after another (not interleaved)"),
    );
    emit(
        Curves::new(
            "scale-held-fill.svg",
            "acquisition rate while filling",
            Unit::Rate,
            fill,
        )
        .detail("(64 in flight, every lock kept; none for fewer than 10 acquisitions)"),
    );
    emit(
        Curves::new("scale-held-rss.svg", "client RSS growth", Unit::KiB, rss)
            .detail("(VmRSS of the child process minus its value after one warm-up cycle)")
            .log_y(),
    );
    emit(
        Curves::new(
            "scale-held-server-memory.svg",
            "server memory growth",
            Unit::KiB,
            mem,
        )
        .detail("(INFO memory used_memory summed over the nodes, minus before the contender)")
        .log_y()
        .notes(notes),
    );
}

/// The contenders of 6c, each with `max` clients (or one, shared by all tasks), every
/// client warmed up by one cycle.
async fn waiting_contenders(urls: &[String], max: usize) -> Vec<(String, Vec<Contender>)> {
    let fifo = Contender::Fifo {
        nodes: floor_nodes(urls).await,
        queue: Arc::new(tokio::sync::Mutex::new(())),
    };
    let mut own = Vec::with_capacity(max);
    for _ in 0..max {
        own.push(Contender::Quorum(quorum(urls, defaults).await));
    }
    let contenders: Vec<(String, Vec<Contender>)> = vec![
        ("floor: FIFO queue + 2 rounds".into(), vec![fifo]),
        (
            format!("{QUORUM}, one client"),
            vec![Contender::Quorum(quorum(urls, defaults).await)],
        ),
        (format!("{QUORUM}, a client per task"), own),
        (
            format!("{RSLOCK}, a client per task"),
            (0..max)
                .map(|_| Contender::Rslock(rslock::LockManager::new(urls.to_vec())))
                .collect(),
        ),
    ];
    for (_, clients) in &contenders {
        for c in clients {
            c.cycle(&unique("s6-warm")).await.expect("warm-up cycle");
        }
    }
    contenders
}

/// (c) 2 to 256 waiters on one resource, N = 5, 1 ms critical section: wait p50/p99,
/// commands per acquisition and rate.
async fn waiters(cfg: Cfg, plots: &Plots) {
    const N: usize = 5;
    const COUNTS: [usize; 8] = [2, 4, 8, 16, 32, 64, 128, 256];
    const MAX: usize = 256;
    let hold = Duration::from_millis(1);
    let cluster = Cluster::start(N);
    let urls = cluster.urls();
    let mut admin: Vec<redis::Connection> = cluster.nodes.iter().map(RedisServer::conn).collect();
    let contenders = waiting_contenders(&urls, MAX).await;
    let names: Vec<String> = contenders.iter().map(|(n, _)| n.clone()).collect();
    let [mut p99, mut p50, mut cmds, mut rate] =
        std::array::from_fn(|_| blank(&names, COUNTS.len()));
    let mut notes = Vec::new();
    let base = cfg.d(Duration::from_millis(1500));
    for (j, &w) in COUNTS.iter().enumerate() {
        // Long enough for the whole queue to take its turn about five times.
        let dur = base.max(Duration::from_micros(7500) * w as u32);
        for k in 0..contenders.len() {
            let i = (k + j) % contenders.len();
            let clients = &contenders[i].1[..contenders[i].1.len().min(w)];
            let mut out = Contention::default();
            contention_slice(clients, w, dur, hold, &mut admin, &mut out).await;
            let mut waits = out.waits.clone();
            waits.extend(&out.pending);
            let s = summarize(waits);
            p50[i].ys[j] = s.p50.as_nanos() as f64;
            p99[i].ys[j] = s.p99.as_nanos() as f64;
            cmds[i].ys[j] = out.commands_per_acquisition();
            rate[i].ys[j] = out.acquisitions as f64 / out.dur.as_secs_f64();
            if let Some(e) = &out.first_error {
                notes.push(format!(
                    "{}, {w} waiters: {} errors, first: {e}",
                    names[i], out.errors
                ));
            }
        }
    }
    drop(contenders);
    drop(admin);
    drop(cluster);
    let x = XAxis {
        part: "6c",
        by: "by waiters on one resource",
        setup: format!(
            "(N = {N}; hold {hold:?} of blocking work; each point one slice of max({:.1} s, \
             7.5 ms x waiters), contenders interleaved)",
            base.as_secs_f64()
        ),
        head: "",
        unit: "waiter",
        label: "tasks waiting on one resource",
        xs: COUNTS.iter().map(|&n| n as f64).collect(),
        log: true,
    };
    let censored = "waits include the tasks still waiting when the slice ended, at their wait so \
                    far (a lower bound); wait = lock() called -> lock() returned";
    let emit = |c: Curves| plots.emit(&x, c);
    emit(
        Curves::new("scale-waiters-p99.svg", "wait p99", Unit::Time, p99)
            .log_y()
            .note(censored),
    );
    emit(
        Curves::new("scale-waiters-p50.svg", "wait p50", Unit::Time, p50)
            .log_y()
            .note(censored),
    );
    emit(
        Curves::new(
            "scale-waiters-commands.svg",
            "commands per acquisition",
            Unit::Num(1),
            cmds,
        )
        .note("INFO commandstats calls on all nodes (inside scripts too) / acquisitions"),
    );
    emit(
        Curves::new(
            "scale-waiters-rate.svg",
            "acquisitions per second",
            Unit::Rate,
            rate,
        )
        .notes(notes),
    );
}
