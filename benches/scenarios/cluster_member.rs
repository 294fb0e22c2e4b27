//! Scenario 12: a member that is a Redis Cluster, N = 1, with restart quarantine on (the
//! builder refuses a Cluster member without it); clusters of masters only, on loopback.
//!
//! (a) spread: one client locks and releases distinct resources one after another on a
//! cluster of 3 masters; each master's command count (`INFO commandstats`) and slots.
//! (b) cost per lock as the shards go 1, 3, 6: the same number of distinct resources on
//! each cluster, the clusters in interleaved rounds, twice: on slots the client has not
//! locked in yet, then on the same resources again; server CPU (`INFO cpu` of the masters)
//! and client CPU per lock.
//! (c) latency: uncontended lock + release of the Cluster member (3 masters) against a
//! plain member on a standalone server and the floors (2 rounds) on that server and on
//! the shard master of the floor's key, interleaved.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::common::topology::RedisClusterTopology;
use crate::common::{RedisServer, unique};
use crate::support::contender::{
    Contender, Kind, Subject, Tune, lock_contenders, quarantined, quarantined_quiet, quorum,
};
use crate::support::measure::{Placement, Run, Servers, interleaved_on, latency_table, order};
use crate::support::shard_probe::{ShardProbe, ShardReading, cluster_member_url, key_slots};
use crate::support::stats::{cpu_time, summarize};
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, FLOOR_2ROUNDS, ROUNDS};

/// The floor (2 rounds) on the cluster master that owns its key's slot.
const FLOOR_SHARD: &str = "floor: 2 rounds on the key's shard master";
/// quorum-lock on the standalone server, restart quarantine on.
const STANDALONE_MEMBER: &str = "quorum-lock, a plain member";
/// [`STANDALONE_MEMBER`] with release notifications off, as a Cluster member has them.
const STANDALONE_QUIET: &str = "quorum-lock, a plain member, notifications(false)";
/// quorum-lock with the 3-master cluster as its one member.
const CLUSTER_MEMBER: &str = "quorum-lock, a Cluster member (3 masters)";

/// Shard counts of part (b).
const SHARD_COUNTS: [usize; 3] = [1, 3, 6];
/// Distinct resources the warm-up of part (b) cycles on: enough to reach every shard.
const WARM_RESOURCES: usize = 64;
/// The per-slot bookkeeping keys of restart quarantine on a Cluster member.
const BOOKKEEPING_KEYS: &str = "quorum-lock:{*}:node:*";
/// How long part (b) watches the idle clusters.
const IDLE_WINDOW: Duration = Duration::from_secs(1);

/// Runs parts (a), (b) and (c), printing a table for each (two for (b)).
pub async fn run(cfg: Cfg) {
    spread(cfg).await;
    cost_by_shards(cfg).await;
    member_latency(cfg).await;
}

/// A connected client whose only member is the cluster `topology`.
async fn cluster_client(topology: &RedisClusterTopology) -> Contender {
    let url = cluster_member_url(topology);
    Contender::Quorum(quorum(std::slice::from_ref(&url), quarantined).await)
}

/// Cycles `member` once on each of `names`, in order, timing each cycle, in a task of the
/// runtime as [`measure`](crate::support::measure::measure) does: on the thread of
/// `block_on` every reply would be a wake-up from another thread, which costs this VM's
/// client ~1.5x the CPU time per cycle.
async fn cycle_each(member: &Contender, names: &[String]) -> Run {
    let (member, names) = (member.clone(), names.to_vec());
    tokio::spawn(async move {
        let mut run = Run::default();
        for name in &names {
            let start = Instant::now();
            let result = member.cycle(name).await;
            run.record(start.elapsed(), result);
        }
        run
    })
    .await
    .expect("cycle task")
}

/// Part (a): distinct resources through one client of a 3-master cluster.
async fn spread(cfg: Cfg) {
    let locks = cfg.n(10_000);
    let topology = RedisClusterTopology::start(3, 0);
    let mut shards = ShardProbe::masters(&topology);
    let member = cluster_client(&topology).await;
    let names: Vec<String> = (0..locks).map(|i| format!("r{i}")).collect();
    let before: Vec<ShardReading> = shards.iter_mut().map(ShardProbe::read).collect();
    let started = Instant::now();
    let run = cycle_each(&member, &names).await;
    let took = started.elapsed();
    let used: Vec<ShardReading> = (shards.iter_mut().zip(&before))
        .map(|(s, b)| s.read().since(b))
        .collect();
    let slots = key_slots(&topology, &names);
    let title = format!(
        "Scenario 12a: a Cluster member of 3 masters, N = 1: {locks} distinct resources \
         (r0, r1, ...) locked and released one after another through one client"
    );
    let mut t = spread_table(title, &mut shards, &used, &slots);
    let s = summarize(run.samples.clone());
    t.note(format!(
        "{} cycles in {:.2} s ({:.1}µs each on average), p50 {:.1}µs, p99 {:.1}µs",
        run.samples.len() + run.errors,
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / locks.max(1) as f64,
        s.p50.as_secs_f64() * 1e6,
        s.p99.as_secs_f64() * 1e6,
    ));
    if let Some(note) = run.error_note(CLUSTER_MEMBER) {
        t.note(note);
    }
    print!("{}", t.render());
    println!();
}

/// Part (a)'s table: per shard its slots, the resources and slots locked in, the commands
/// and the keys left, with the spread of the commands and what a lock cost in commands in
/// the notes.
fn spread_table(
    title: String,
    shards: &mut [ShardProbe],
    used: &[ShardReading],
    slots: &[u16],
) -> Table {
    let mut t = Table::new(
        title,
        &[
            ("slots", Unit::Num(0)),
            ("resources", Unit::Num(0)),
            ("slots locked in", Unit::Num(0)),
            ("commands", Unit::Num(0)),
            ("commands/resource", Unit::Num(2)),
            ("share", Unit::Pct),
            ("keys after", Unit::Num(0)),
            ("of them bookkeeping", Unit::Num(0)),
        ],
    );
    let calls: Vec<f64> = used.iter().map(|u| u.total_calls() as f64).collect();
    let all_calls: f64 = calls.iter().sum();
    let mut routed = Vec::new();
    for (shard, &c) in shards.iter_mut().zip(&calls) {
        let mine: Vec<u16> = slots.iter().copied().filter(|&s| shard.owns(s)).collect();
        let distinct: BTreeSet<u16> = mine.iter().copied().collect();
        let r = mine.len() as f64;
        routed.push(r);
        t.row(
            format!("master {} (port {})", shard.index, shard.port),
            vec![
                Cell::Val(f64::from(shard.slot_count())),
                Cell::Val(r),
                Cell::Val(distinct.len() as f64),
                Cell::Val(c),
                Cell::Val(if r == 0.0 { 0.0 } else { c / r }),
                Cell::Val(if all_calls == 0.0 { 0.0 } else { c / all_calls }),
                Cell::Val(shard.dbsize() as f64),
                Cell::Val(shard.count_keys(BOOKKEEPING_KEYS) as f64),
            ],
        );
    }
    t.note(format!(
        "commands max/mean {:.3} (target <= 1.1); resources max/mean {:.3}",
        max_over_mean(&calls),
        max_over_mean(&routed)
    ));
    let mut total = ShardReading::default();
    used.iter().for_each(|u| total.add(u));
    t.note(format!(
        "commands per resource, all shards: {}",
        per_command(&total, slots.len())
    ));
    t.note(format!(
        "commands = calls= summed over the master's INFO commandstats (the commands a \
         script runs included), less the bench's own INFO readings; keys after = DBSIZE \
         once every lock is released; bookkeeping = the keys matching {BOOKKEEPING_KEYS} \
         (each slot's longest-TTL record and admission marker, which do not expire)"
    ));
    t
}

/// The largest of `values` over their mean (0 without values or with a zero mean).
fn max_over_mean(values: &[f64]) -> f64 {
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    let max = values.iter().copied().fold(0.0, f64::max);
    if mean == 0.0 { 0.0 } else { max / mean }
}

/// `reading`'s calls per lock by command, most frequent first: `evalsha 1.00, ...`.
fn per_command(reading: &ShardReading, locks: usize) -> String {
    let mut calls: Vec<(&String, &u64)> = reading.calls.iter().collect();
    calls.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let per = |n: u64| n as f64 / locks.max(1) as f64;
    (calls.iter())
        .map(|(name, n)| format!("{name} {:.3}", per(**n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One cluster of part (b): its client and its masters.
struct CostRig {
    shards: usize,
    member: Contender,
    probes: Vec<ShardProbe>,
    /// Kept for its servers, which stop when it is dropped.
    _topology: RedisClusterTopology,
}

/// What a rig's locks cost: their cycles, the client's CPU time and each master's work.
#[derive(Default)]
struct LockCost {
    run: Run,
    client: Duration,
    per_shard: Vec<ShardReading>,
}

impl CostRig {
    /// A cluster of `shards` masters and a client of it, warmed up with `warm` cycles over
    /// [`WARM_RESOURCES`] resources (connected to every master, slot table learnt).
    async fn start(shards: usize, warm: usize) -> CostRig {
        let topology = RedisClusterTopology::start(shards, 0);
        let member = cluster_client(&topology).await;
        let names: Vec<String> = (0..warm)
            .map(|i| format!("warm{shards}-{}", i % WARM_RESOURCES))
            .collect();
        cycle_each(&member, &names).await;
        CostRig {
            shards,
            member,
            probes: ShardProbe::masters(&topology),
            _topology: topology,
        }
    }

    /// Locks and releases each of `names` once, with the client's and the masters' costs.
    async fn chunk(&mut self, names: &[String]) -> LockCost {
        let before: Vec<ShardReading> = self.probes.iter_mut().map(ShardProbe::read).collect();
        let client0 = cpu_time();
        let run = cycle_each(&self.member, names).await;
        let client = cpu_time().saturating_sub(client0);
        let per_shard = (self.probes.iter_mut().zip(&before))
            .map(|(p, b)| p.read().since(b))
            .collect();
        LockCost {
            run,
            client,
            per_shard,
        }
    }

    /// The masters' CPU time so far, summed.
    fn server_cpu(&mut self) -> Duration {
        self.probes.iter_mut().map(|p| p.read().cpu).sum()
    }
}

impl LockCost {
    /// Adds `other`'s cycles, client CPU time and per-master work to these.
    fn merge(&mut self, other: LockCost) {
        self.run.merge(other.run);
        self.client += other.client;
        if self.per_shard.is_empty() {
            self.per_shard = vec![ShardReading::default(); other.per_shard.len()];
        }
        for (mine, theirs) in self.per_shard.iter_mut().zip(&other.per_shard) {
            mine.add(theirs);
        }
    }

    /// Cycles done, failed ones included.
    fn cycles(&self) -> f64 {
        (self.run.samples.len() + self.run.errors) as f64
    }

    /// The masters' CPU time, summed.
    fn server(&self) -> Duration {
        self.per_shard.iter().map(|s| s.cpu).sum()
    }

    /// The mean wall time of a cycle.
    fn mean_cycle(&self) -> Duration {
        let total: Duration = self.run.samples.iter().sum();
        total.div_f64(self.run.samples.len().max(1) as f64)
    }
}

/// Part (b): server and client CPU per lock on clusters of 1, 3 and 6 masters.
async fn cost_by_shards(cfg: Cfg) {
    let locks = cfg.n(3000);
    let warm = cfg.n(300);
    let mut rigs = Vec::new();
    for shards in SHARD_COUNTS {
        rigs.push(CostRig::start(shards, warm).await);
    }
    let idle = idle_cpu(&mut rigs).await;
    let passes = [
        ("slots this client has not locked in before", "fresh"),
        ("the same resources again", "again"),
    ];
    for (what, label) in passes {
        let costs = cost_rounds(&mut rigs, locks).await;
        let title = format!(
            "Scenario 12b ({label}): a Cluster member of 1, 3 and 6 masters, N = 1: {locks} \
             distinct resources each, on {what}, locked and released one after another \
             ({ROUNDS} interleaved rounds, after {warm} warm-up cycles on \
             {WARM_RESOURCES} other resources)"
        );
        let mut t = cost_table(title, &costs);
        t.note(
            "server cpu = used_cpu_sys + used_cpu_user (INFO cpu) summed over the masters, \
             per lock; per shard = that over the masters; busiest = the master with the \
             most, per lock; script time = usec of EVALSHA in INFO commandstats (the time \
             spent running scripts) summed over the masters, per lock; commands/lock counts \
             the commands scripts run too; cpu/cycle = CPU time of the whole client process \
             per cycle",
        );
        t.note(idle_note(&idle, &costs));
        for cost in &costs {
            if let Some(note) = cost.run.error_note(&shards_name(cost.per_shard.len())) {
                t.note(note);
            }
        }
        print!("{}", t.render());
        println!();
    }
}

/// One pass of part (b): each rig locks `locks` distinct resources (`s<shards>-r<k>`, the
/// same names every pass) in [`ROUNDS`] interleaved chunks.
async fn cost_rounds(rigs: &mut [CostRig], locks: usize) -> Vec<LockCost> {
    let mut costs: Vec<LockCost> = rigs.iter().map(|_| LockCost::default()).collect();
    let per_round = locks.div_ceil(ROUNDS);
    let all: Vec<usize> = (0..rigs.len()).collect();
    for round in 0..ROUNDS {
        let range = (round * per_round).min(locks)..((round + 1) * per_round).min(locks);
        for i in order(&all, round) {
            let shards = rigs[i].shards;
            let names: Vec<String> = range.clone().map(|k| format!("s{shards}-r{k}")).collect();
            costs[i].merge(rigs[i].chunk(&names).await);
        }
    }
    costs
}

/// `1 shard`, `3 shards`.
fn shards_name(shards: usize) -> String {
    match shards {
        1 => "1 shard".to_string(),
        n => format!("{n} shards"),
    }
}

/// Part (b)'s table: per shard count, CPU per lock and commands per lock.
fn cost_table(title: String, costs: &[LockCost]) -> Table {
    let mut t = Table::new(
        title,
        &[
            ("server cpu/lock", Unit::Time),
            ("per shard", Unit::Time),
            ("busiest shard", Unit::Time),
            ("script time", Unit::Time),
            ("cpu/cycle", Unit::Time),
            ("commands/lock", Unit::Num(2)),
            ("p50", Unit::Time),
        ],
    );
    for cost in costs {
        let cycles = cost.cycles().max(1.0);
        let shards = cost.per_shard.len().max(1);
        let busiest = (cost.per_shard.iter())
            .map(|s| s.cpu)
            .max()
            .unwrap_or_default();
        let calls: u64 = cost.per_shard.iter().map(ShardReading::total_calls).sum();
        let script_time: Duration = cost.per_shard.iter().map(|s| s.script_time).sum();
        t.row(
            shards_name(cost.per_shard.len()),
            vec![
                Cell::time(cost.server().div_f64(cycles)),
                Cell::time(cost.server().div_f64(cycles * shards as f64)),
                Cell::time(busiest.div_f64(cycles)),
                Cell::time(script_time.div_f64(cycles)),
                Cell::time(cost.client.div_f64(cycles)),
                Cell::Val(calls as f64 / cycles),
                Cell::time(summarize(cost.run.samples.clone()).p50),
            ],
        );
    }
    t.ratios(&[
        (0, "1 shard", "server cpu/1 shard"),
        (3, "1 shard", "script time/1 shard"),
        (4, "1 shard", "cpu/1 shard"),
    ]);
    t
}

/// Each rig's server CPU time per second while no client works, over [`IDLE_WINDOW`].
async fn idle_cpu(rigs: &mut [CostRig]) -> Vec<Duration> {
    let before: Vec<Duration> = rigs.iter_mut().map(CostRig::server_cpu).collect();
    let start = Instant::now();
    tokio::time::sleep(IDLE_WINDOW).await;
    let secs = start.elapsed().as_secs_f64();
    (rigs.iter_mut().zip(before))
        .map(|(rig, b)| rig.server_cpu().saturating_sub(b).div_f64(secs))
        .collect()
}

/// The idle clusters' CPU per second, and the part of each row's server CPU per lock it
/// makes at that row's cycle time.
fn idle_note(idle: &[Duration], costs: &[LockCost]) -> String {
    let parts: Vec<String> = (idle.iter().zip(costs))
        .map(|(per_sec, cost)| {
            let share = per_sec.mul_f64(cost.mean_cycle().as_secs_f64());
            format!(
                "{}: {:.2} ms/s, {:.1}µs a lock",
                shards_name(cost.per_shard.len()),
                per_sec.as_secs_f64() * 1e3,
                share.as_secs_f64() * 1e6
            )
        })
        .collect();
    format!(
        "the idle masters' own CPU (cluster bus, cron; INFO cpu over {IDLE_WINDOW:?} with \
         no client working), and what of server cpu/lock it makes at the mean cycle time: {}",
        parts.join("; ")
    )
}

/// Part (c): the Cluster member's uncontended latency against a plain member and floors.
async fn member_latency(cfg: Cfg) {
    let warm = cfg.n(300);
    let iters = cfg.n(3000);
    let topology = RedisClusterTopology::start(3, 0);
    let plain = RedisServer::start();
    let (subjects, placements) = latency_subjects(&topology, &plain).await;
    let list: Vec<Subject> = subjects.iter().map(|(_, s)| s.clone()).collect();
    let runs = interleaved_on(&list, &placements, warm, iters).await;
    let title = format!(
        "Scenario 12c: a Cluster member of 3 masters against a plain member, N = 1, \
         uncontended lock + unlock ({iters} timed cycles each in {ROUNDS} interleaved \
         rounds, after {warm} warm-up; same resource every cycle)"
    );
    let mut t = latency_table(title, &subjects, &runs);
    t.ratios(&[
        (0, STANDALONE_MEMBER, "p50/plain"),
        (0, FLOOR_2ROUNDS, "p50/floor"),
        (1, STANDALONE_MEMBER, "p99/plain"),
        (1, FLOOR_2ROUNDS, "p99/floor"),
        (3, STANDALONE_MEMBER, "server cpu/plain"),
    ]);
    t.note(format!(
        "both members with restart quarantine on; floor (for ratios) = {FLOOR_2ROUNDS} on the \
         standalone server"
    ));
    t.note(
        "the Cluster member sends its acquire script on every lock (the plain SET NX PX \
         fast path is off: the quarantine record and marker are per slot) and has release \
         notifications off (the builder turns them off with a Cluster member): its cycle is \
         the acquire script + the compare-and-delete, the plain member's SET NX PX + the \
         release script (notifications on) or the compare-and-delete (off)",
    );
    t.note(
        "server cpu: the standalone server for the plain rows, the key's master for the \
         shard floor, all 3 masters (their cluster bus included) for the Cluster member",
    );
    print!("{}", t.render());
    println!();
}

/// Part (c)'s subjects, in table order, each with its resource and the servers it is
/// charged: the floors, the plain member with and without notifications, the Cluster
/// member.
async fn latency_subjects(
    topology: &RedisClusterTopology,
    plain: &RedisServer,
) -> (Vec<(&'static str, Subject)>, Vec<Placement>) {
    let plain_pid: Servers = Arc::from([plain.pid()]);
    let masters: Servers = (0..3).map(|i| topology.node(i).pid()).collect();
    let at = |servers: &Servers| Placement {
        resource: unique("lat"),
        servers: Arc::clone(servers),
    };
    let mut subjects = Vec::new();
    let mut placements = Vec::new();
    for subject in lock_contenders(&[plain.url()], &[Kind::TwoRounds]).await {
        subjects.push(subject);
        placements.push(at(&plain_pid));
    }
    let shard_key = unique("lat");
    let owner = topology.master_for_key(&shard_key);
    for (_, subject) in lock_contenders(&[topology.node(owner).url()], &[Kind::TwoRounds]).await {
        subjects.push((FLOOR_SHARD, subject));
        placements.push(Placement {
            resource: shard_key.clone(),
            servers: Arc::from([topology.node(owner).pid()]),
        });
    }
    let cluster_url = cluster_member_url(topology);
    let members = [
        (
            STANDALONE_MEMBER,
            plain.url(),
            quarantined as Tune,
            &plain_pid,
        ),
        (
            STANDALONE_QUIET,
            plain.url(),
            quarantined_quiet as Tune,
            &plain_pid,
        ),
        (CLUSTER_MEMBER, cluster_url, quarantined as Tune, &masters),
    ];
    for (name, url, tune, servers) in members {
        let client = quorum(std::slice::from_ref(&url), tune).await;
        subjects.push((name, Subject::Async(Contender::Quorum(client))));
        placements.push(at(servers));
    }
    (subjects, placements)
}
