//! Scenario 8: the counting semaphore, K = 4 permits shared by 16 tasks that each hold a
//! permit for 1 ms, N = 1 and 3: acquisitions per second, the wait for a permit (p50, p99)
//! and server commands per acquisition, against a floor that sends the same slot traffic
//! with no logic (per slot, from a random one on: `SET NX PX` on every node, the
//! compare-and-delete wherever it was not won; 1 ms pause after a pass with every slot
//! held).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Cfg;
use crate::common::{Cluster, RedisServer, unique};
use crate::support::contender::{FloorNode, compare_and_delete, defaults, floor_nodes, quorum};
use crate::support::contender::{round, set_nx_px};
use crate::support::stats::{commandstats_sum, delta, percentile};
use crate::support::table::{Cell, Table, Unit};

const PERMITS: u32 = 4;
const TASKS: usize = 16;
const HOLD: Duration = Duration::from_millis(1);
const FLOOR_PAUSE: Duration = Duration::from_millis(1);
const TTL_MS: u64 = 10_000;
/// Measured slices per contender, interleaved.
const SLICES: usize = 3;

const FLOOR: &str = "floor: K slot locks, no logic";
const QUORUM_DEFAULT: &str = "quorum-lock semaphore";
const QUORUM_FAST: &str = "quorum-lock semaphore, retry 1 ms";

/// One contender's way to take and give back a permit.
#[derive(Clone)]
enum Sem {
    Floor(Arc<Vec<FloorNode>>, Arc<str>),
    Quorum(quorum_lock::Semaphore),
}

/// What a slice measured.
#[derive(Default)]
struct Slice {
    acquired: usize,
    waits: Vec<Duration>,
    elapsed: Duration,
}

pub async fn run(cfg: Cfg) {
    for n in [1usize, 3] {
        let cluster = Cluster::start(n);
        let urls = cluster.urls();
        let mut admin: Vec<redis::Connection> =
            cluster.nodes.iter().map(RedisServer::conn).collect();
        let name = unique("s8");
        let fast = |b: quorum_lock::RedlockBuilder| {
            b.retry_delay(Duration::from_millis(1))
                .max_retry_delay(Duration::from_millis(1))
        };
        let contenders = [
            (
                FLOOR,
                Sem::Floor(floor_nodes(&urls).await, Arc::from(name.as_str())),
            ),
            (QUORUM_DEFAULT, semaphore(&urls, defaults, &name).await),
            (QUORUM_FAST, semaphore(&urls, fast, &name).await),
        ];
        let mut slices: Vec<Slice> = contenders.iter().map(|_| Slice::default()).collect();
        let mut commands = vec![0u64; contenders.len()];
        for _ in 0..SLICES {
            for (i, (_, sem)) in contenders.iter().enumerate() {
                let before = commandstats_sum(&mut admin);
                let slice = measure(sem, cfg.d(Duration::from_secs(1))).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                commands[i] += delta(&before, &commandstats_sum(&mut admin))
                    .into_iter()
                    .filter(|(cmd, _)| !cmd.starts_with("info"))
                    .map(|(_, calls)| calls)
                    .sum::<u64>();
                let total = &mut slices[i];
                total.acquired += slice.acquired;
                total.waits.extend(slice.waits);
                total.elapsed += slice.elapsed;
            }
        }
        let mut t = Table::new(
            format!(
                "Scenario 8: semaphore, K = {PERMITS}, {TASKS} tasks holding a permit {HOLD:?} \
                 each, N = {n} ({SLICES} interleaved slices of {:.1} s each)",
                cfg.d(Duration::from_secs(1)).as_secs_f64()
            ),
            &[
                ("permits/s", Unit::Rate),
                ("wait p50", Unit::Time),
                ("wait p99", Unit::Time),
                ("cmds/permit", Unit::Num(1)),
            ],
        );
        for (((label, _), slice), cmds) in contenders.iter().zip(&mut slices).zip(&commands) {
            slice.waits.sort_unstable();
            let rate = slice.acquired as f64 / slice.elapsed.as_secs_f64().max(1e-9);
            let wait = |p| percentile(&slice.waits, p).as_nanos() as f64;
            let per = *cmds as f64 / slice.acquired.max(1) as f64;
            let cells = vec![
                Cell::Val(rate),
                Cell::Val(wait(50.0)),
                Cell::Val(wait(99.0)),
            ];
            t.row(*label, [cells, vec![Cell::Val(per)]].concat());
        }
        t.ratios(&[(0, FLOOR, "rate/floor"), (2, FLOOR, "p99/floor")]);
        t.note("the wait: from wanting a permit to holding it; cmds/permit: commands on all nodes per permit taken, scripts' inner calls included");
        t.note(format!("{QUORUM_DEFAULT}: the client's default retry delays (jittered, doubling from 10 ms up to 200 ms between passes over the slots); {QUORUM_FAST}: 1 ms between passes, as the floor"));
        print!("{}", t.render());
        println!();
        drop(cluster);
    }
}

async fn semaphore(urls: &[String], tune: crate::support::contender::Tune, name: &str) -> Sem {
    let client = quorum(urls, tune).await;
    Sem::Quorum(client.semaphore(name, PERMITS).expect("semaphore"))
}

/// `TASKS` tasks taking and giving back permits for `dur`.
async fn measure(sem: &Sem, dur: Duration) -> Slice {
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let sem = sem.clone();
            tokio::spawn(async move {
                let mut slice = Slice::default();
                while started.elapsed() < dur {
                    let wanted = Instant::now();
                    let held = take(&sem).await;
                    slice.waits.push(wanted.elapsed());
                    tokio::time::sleep(HOLD).await;
                    give_back(&sem, held).await;
                    slice.acquired += 1;
                }
                slice
            })
        })
        .collect();
    let mut total = Slice::default();
    for task in tasks {
        let slice = task.await.expect("bench task");
        total.acquired += slice.acquired;
        total.waits.extend(slice.waits);
    }
    total.elapsed = started.elapsed();
    total
}

/// A permit held: the floor's key and token, or quorum-lock's permit.
enum Held {
    Floor(String, String),
    Quorum(Box<quorum_lock::Permit>),
}

async fn take(sem: &Sem) -> Held {
    match sem {
        Sem::Quorum(s) => {
            let permit = s.acquire(Duration::from_millis(TTL_MS));
            Held::Quorum(Box::new(
                permit.wait(Duration::from_secs(60)).await.expect("permit"),
            ))
        }
        Sem::Floor(nodes, name) => loop {
            let first = rand::random::<u32>() % PERMITS;
            for step in 0..PERMITS {
                let key = format!("{name}:{}", (first + step) % PERMITS);
                let token = unique("floor-permit");
                let yes = round(nodes, nodes.len(), &set_nx_px(&key, &token, TTL_MS)).await;
                if yes > nodes.len() / 2 {
                    return Held::Floor(key, token);
                }
                if yes > 0 {
                    round(nodes, nodes.len(), &compare_and_delete(&key, &token)).await;
                }
            }
            tokio::time::sleep(FLOOR_PAUSE).await;
        },
    }
}

async fn give_back(sem: &Sem, held: Held) {
    match (sem, held) {
        (Sem::Quorum(_), Held::Quorum(permit)) => {
            permit.release().await.expect("release");
        }
        (Sem::Floor(nodes, _), Held::Floor(key, token)) => {
            round(nodes, nodes.len(), &compare_and_delete(&key, &token)).await;
        }
        _ => unreachable!("a permit goes back where it came from"),
    }
}
