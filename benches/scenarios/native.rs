//! Scenario 7: native `DELIFEQ` / `SET IFEQ` against the Lua scripts, on a Valkey-only
//! ensemble of N = 5: 16 tasks on their own resources, each cycle lock + extend + release.
//!
//! Three clients of the same ensemble, in interleaved slices: native commands with
//! notifications off (release by `DELIFEQ`, extend by `SET IFEQ`), the same with native
//! commands off (both by script), and the defaults (notifications on: the release keeps the
//! script, because it may wake a waiter; the extend is native). Server cost is read twice:
//! the servers' CPU time (`/proc`), and the time the servers spent executing commands
//! (`INFO commandstats`, `usec` summed over every command and node), with the calls per
//! cycle of `EVALSHA` and `DELIFEQ` that show which path ran.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::common::{Cluster, RedisServer, ServerExtras, ServerOptions};
use crate::support::contender::{Contender, Subject, quorum};
use crate::support::measure::{Throughput, cpu_cells, servers_of, throughput};
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, QUORUM};

/// The first `valkey-server` of `QUORUM_LOCK_SERVERS`, else the one `scripts/servers.sh`
/// caches.
fn valkey_bin() -> Option<PathBuf> {
    let listed = crate::common::listed_server_bins()
        .into_iter()
        .find(|b| b.file_name().is_some_and(|n| n == "valkey-server"));
    let cached = std::env::var_os("QUORUM_LOCK_SERVER_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/quorum-lock/servers"))
        })
        .map(|dir| dir.join("valkey-9.1/valkey-server"))
        .filter(|p| p.is_file());
    listed.or(cached)
}

fn native(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b.notifications(false)
}

fn lua(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b.notifications(false).native_commands(false)
}

fn defaults(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b
}

/// Per command: `(calls, usec)` summed over the servers' `INFO commandstats`.
fn commandstats(cluster: &Cluster) -> HashMap<String, (u64, u64)> {
    let mut total: HashMap<String, (u64, u64)> = HashMap::new();
    for node in &cluster.nodes {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut node.conn())
            .expect("INFO commandstats");
        for line in info.lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let entry = total.entry(name.to_owned()).or_default();
            entry.0 += field("calls=");
            entry.1 += field("usec=");
        }
    }
    total
}

/// What the servers did between two [`commandstats`] readings: total usec, and the calls
/// of `evalsha` and `delifeq`.
#[derive(Default, Clone, Copy)]
struct Executed {
    usec: u64,
    evalsha: u64,
    delifeq: u64,
}

impl Executed {
    fn between(a: &HashMap<String, (u64, u64)>, b: &HashMap<String, (u64, u64)>) -> Executed {
        let delta = |name: &str, pick: fn(&(u64, u64)) -> u64| {
            let before = a.get(name).map_or(0, pick);
            b.get(name).map_or(0, pick).saturating_sub(before)
        };
        Executed {
            usec: b.keys().map(|k| delta(k, |e| e.1)).sum(),
            evalsha: delta("evalsha", |e| e.0),
            delifeq: delta("delifeq", |e| e.0),
        }
    }

    fn add(&mut self, o: Executed) {
        self.usec += o.usec;
        self.evalsha += o.evalsha;
        self.delifeq += o.delifeq;
    }
}

const N: usize = 5;
const TASKS: usize = 16;
const SLICES: usize = 6;

pub async fn run(cfg: Cfg) {
    let Some(bin) = valkey_bin() else {
        println!("Scenario 7: skipped: no valkey-server (run scripts/servers.sh)\n");
        return;
    };
    let warm = cfg.d(Duration::from_millis(500));
    let dur = cfg.d(Duration::from_secs(3));
    let cluster = Cluster {
        nodes: (0..N)
            .map(|_| {
                let extras = ServerExtras {
                    bin: Some(bin.clone()),
                    ..ServerExtras::default()
                };
                RedisServer::start_extended(ServerOptions::default(), extras)
            })
            .collect(),
    };
    let urls = cluster.urls();
    let servers = servers_of(&cluster);
    let subjects = [
        ("native (DELIFEQ, SET IFEQ)", native as fn(_) -> _),
        ("Lua scripts", lua),
        ("defaults (notifications on)", defaults),
    ];
    let mut contenders = Vec::new();
    for (_, tune) in &subjects {
        let rl = quorum(&urls, *tune).await;
        contenders.push(Subject::Async(Contender::QuorumExtend(rl)));
    }
    for s in &contenders {
        throughput(s, TASKS, warm, Duration::ZERO, &servers).await;
    }
    let mut results: Vec<Throughput> = contenders.iter().map(|_| Throughput::default()).collect();
    let mut executed = vec![Executed::default(); contenders.len()];
    for slice in 0..SLICES {
        for k in 0..contenders.len() {
            let i = (k + slice) % contenders.len();
            let before = commandstats(&cluster);
            // No warm-up inside a slice, so the commandstats delta covers the counted
            // cycles (plus the last cycle of each task, finished after the slice ended).
            let r = throughput(
                &contenders[i],
                TASKS,
                Duration::ZERO,
                dur / SLICES as u32,
                &servers,
            )
            .await;
            executed[i].add(Executed::between(&before, &commandstats(&cluster)));
            results[i].merge(r);
        }
    }

    let names: Vec<&str> = subjects.iter().map(|(name, _)| *name).collect();
    print!("{}", table(&names, &results, &executed, &bin, dur).render());
    println!();
    drop(cluster);
}

/// The scenario's table: one row per client, ratios to the Lua row.
fn table(
    names: &[&str],
    results: &[Throughput],
    executed: &[Executed],
    bin: &std::path::Path,
    dur: Duration,
) -> Table {
    let mut t = Table::new(
        format!(
            "Scenario 7: native commands vs Lua, Valkey 9 only, N = {N}, {TASKS} tasks each on \
             its own resource, cycle = lock + extend + release ({:.1} s each in {SLICES} \
             interleaved slices)",
            dur.as_secs_f64()
        ),
        &[
            ("cycles/s", Unit::Rate),
            ("cpu/cycle", Unit::Time),
            ("server cpu", Unit::Time),
            ("cmd time", Unit::Time),
            ("evalsha", Unit::Num(2)),
            ("delifeq", Unit::Num(2)),
        ],
    );
    let mut rows: Vec<String> = Vec::new();
    for ((name, r), e) in names.iter().zip(results).zip(executed) {
        if let Some(err) = &r.first_error {
            t.note(format!("{name}: {} failed cycles, first: {err}", r.errors));
        }
        let [cpu, server_cpu] = cpu_cells(r.cpu_per_cycle());
        let per = |x: u64| {
            if r.cycles == 0 {
                Cell::Empty
            } else {
                Cell::Val(x as f64 / r.cycles as f64)
            }
        };
        let cmd_ns = |x: u64| per(x.saturating_mul(1000));
        rows.push(format!("{QUORUM} {name}"));
        t.row(
            format!("{QUORUM} {name}"),
            vec![
                Cell::Val(r.per_sec()),
                cpu,
                server_cpu,
                cmd_ns(e.usec),
                per(e.evalsha),
                per(e.delifeq),
            ],
        );
    }
    t.ratio(0, &rows[1], "rate/Lua");
    t.ratio(2, &rows[1], "server cpu/Lua");
    t.ratio(3, &rows[1], "cmd time/Lua");
    t.note("per cycle: server cpu = all valkey-servers' CPU time (/proc); cmd time = usec spent executing commands, summed over INFO commandstats of the 5 nodes");
    t.note("evalsha, delifeq = calls per cycle over the 5 nodes (5 = one per node); quorum-lock: one client per row shared by all tasks");
    t.note(format!("server: {}", bin.display()));
    t
}
